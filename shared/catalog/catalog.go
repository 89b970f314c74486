// Package catalog is the one place that names the pipeline's topics, event
// types, tags and consumer groups (docs/design.md §3).
//
// Names here are the firm, logical names: event types, consumer group names
// (which are also the inbox consumer_name) and logical topics keep their
// dotted spelling everywhere in the product. RocketMQ accepts only
// ^[%|a-zA-Z0-9_-]+$ in topic and group names, so whatever talks to the broker
// uses [BrokerName], which replaces each '.' with '_'
// (generation.submit.delay -> generation_submit_delay). The mapping is
// injective for the catalog's names; [TestBrokerNamesAreLegal] keeps it so.
package catalog

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// MessageType is a RocketMQ 5 topic message type; the proxy refuses a message
// whose kind does not match its topic's type.
type MessageType string

// The RocketMQ 5 topic message types.
const (
	Normal MessageType = "NORMAL"
	Delay  MessageType = "DELAY"
	FIFO   MessageType = "FIFO"
)

// Event types (docs/design.md §3), the event_type of an envelope.
const (
	EventSubmitRequested  = "generation.submit.requested"
	EventPollDue          = "generation.poll.due"
	EventCallbackReceived = "provider.callback.received"
	EventFetchRequested   = "asset.fetch.requested"
	EventPostprocess      = "asset.postprocess.requested"
	EventRenderRequested  = "render.export.requested"
	EventSettleRequested  = "billing.settle.requested"
	EventTaskStateChanged = "task.state.changed"
	EventReconcileDue     = "task.reconcile.due"
)

// Tags of asset.postprocess: which media step a message asks for.
const (
	TagProbe          = "PROBE"
	TagTranscodeProxy = "TRANSCODE_PROXY"
	TagThumbnail      = "THUMBNAIL"
	TagWaveform       = "WAVEFORM"
	// TagReview asks the optional content review of a task's output (seed
	// 7.8.3): sent by the probe only when review was on for the task.
	TagReview = "REVIEW"
)

// derivativeKinds maps each derivative step to the assets.kind it makes.
var derivativeKinds = map[string]string{
	TagTranscodeProxy: "PROXY",
	TagThumbnail:      "THUMBNAIL",
	TagWaveform:       "WAVEFORM",
}

// DerivativeKind is the assets.kind a derivative step makes; "" for a step
// that makes none (the probe, or an unknown one).
func DerivativeKind(step string) string { return derivativeKinds[step] }

// DerivativeStep is the step that makes an assets.kind; "" for a kind no
// step makes (the SOURCE).
func DerivativeStep(kind string) string {
	for step, k := range derivativeKinds {
		if k == kind {
			return step
		}
	}
	return ""
}

// Topic is one physical topic with its RocketMQ message type.
type Topic struct {
	Name    string // firm name, e.g. "generation.submit.delay"
	Logical string // logical topic it belongs to, e.g. "generation.submit"
	Type    MessageType
}

// BrokerName is the name RocketMQ knows the topic by.
func (t Topic) BrokerName() string { return BrokerName(t.Name) }

// Physical topics (docs/design.md §3).
var (
	GenerationSubmit      = Topic{"generation.submit", "generation.submit", Normal}
	GenerationSubmitDelay = Topic{"generation.submit.delay", "generation.submit", Delay}
	GenerationPollDelay   = Topic{"generation.poll.delay", "generation.poll", Delay}
	GenerationCallback    = Topic{"generation.callback", "generation.callback", Normal}
	AssetFetch            = Topic{"asset.fetch", "asset.fetch", Normal}
	AssetFetchDelay       = Topic{"asset.fetch.delay", "asset.fetch", Delay}
	AssetPostprocess      = Topic{"asset.postprocess", "asset.postprocess", Normal}
	// AssetPostprocessDelay carries a media step put off by a business
	// wait: a content review whose reviewer was unavailable.
	AssetPostprocessDelay = Topic{"asset.postprocess.delay", "asset.postprocess", Delay}
	RenderExport          = Topic{"render.export", "render.export", Normal}
	// RenderExportDelay carries a chunk put off by a business wait: its
	// tenant already renders RENDER_TENANT_CHUNKS chunks.
	RenderExportDelay   = Topic{"render.export.delay", "render.export", Delay}
	BillingSettle       = Topic{"billing.settle", "billing.settle", Normal}
	GenerationStateFIFO = Topic{"generation.state.fifo", "notification.event", FIFO}
	ReconcileDelay      = Topic{"compensation.reconcile.delay", "compensation.reconcile", Delay}
)

// Topics lists every physical topic.
func Topics() []Topic {
	return []Topic{
		GenerationSubmit, GenerationSubmitDelay, GenerationPollDelay, GenerationCallback,
		AssetFetch, AssetFetchDelay, AssetPostprocess, AssetPostprocessDelay, RenderExport, RenderExportDelay, BillingSettle, GenerationStateFIFO, ReconcileDelay,
	}
}

// Subscription is one topic a group reads and the tags it takes from it.
type Subscription struct {
	Topic Topic
	Tags  []string // empty: every tag
}

// FilterExpression is the RocketMQ tag expression for the subscription:
// "*" or "A||B".
func (s Subscription) FilterExpression() string {
	if len(s.Tags) == 0 {
		return "*"
	}
	return strings.Join(s.Tags, "||")
}

// Group is a consumer group: one stage's view of its topics.
type Group struct {
	Name  string // firm name, e.g. "cg.scheduler.submit.v1"; also the inbox consumer_name
	Stage string // the function that handles its messages
	// MaxDeliveryAttempts bounds redelivery; the broker then moves the message
	// to the group's dead-letter topic, which `adapter dlq drain` quarantines.
	MaxDeliveryAttempts int
	// Orderly groups consume a FIFO topic one message at a time per message group.
	Orderly bool
	// Owner is the team that handles the group's quarantine (seed 7.12.2),
	// and HandleWithin how long after its first failure a quarantined
	// message may stay open before it is overdue and alerts.
	Owner         string
	HandleWithin  time.Duration
	Subscriptions []Subscription
}

// BrokerName is the name RocketMQ knows the group by.
func (g Group) BrokerName() string { return BrokerName(g.Name) }

// DLQTopic is the broker's dead-letter topic of the group.
func (g Group) DLQTopic() string { return "%DLQ%" + g.BrokerName() }

// Consumer groups (docs/design.md §3).
var (
	GroupSubmit = Group{Name: "cg.scheduler.submit.v1", Stage: "submit", MaxDeliveryAttempts: 16,
		Owner: "team-generation", HandleWithin: 4 * time.Hour,
		Subscriptions: []Subscription{{GenerationSubmit, []string{EventSubmitRequested}}, {GenerationSubmitDelay, []string{EventSubmitRequested}}}}
	GroupPoll = Group{Name: "cg.provider.poll.v1", Stage: "poll", MaxDeliveryAttempts: 16,
		Owner: "team-generation", HandleWithin: 4 * time.Hour,
		Subscriptions: []Subscription{{GenerationPollDelay, []string{EventPollDue}}}}
	GroupCallback = Group{Name: "cg.callback.apply.v1", Stage: "poll", MaxDeliveryAttempts: 16,
		Owner: "team-generation", HandleWithin: 4 * time.Hour,
		Subscriptions: []Subscription{{GenerationCallback, []string{EventCallbackReceived}}}}
	GroupFetch = Group{Name: "cg.asset.fetch.v1", Stage: "fetch", MaxDeliveryAttempts: 16,
		Owner: "team-media", HandleWithin: 8 * time.Hour,
		Subscriptions: []Subscription{{AssetFetch, []string{EventFetchRequested}}, {AssetFetchDelay, []string{EventFetchRequested}}}}
	GroupProbe = Group{Name: "cg.asset.probe.v1", Stage: "probe", MaxDeliveryAttempts: 16,
		Owner: "team-media", HandleWithin: 8 * time.Hour,
		Subscriptions: []Subscription{{AssetPostprocess, []string{TagProbe}}}}
	GroupTranscode = Group{Name: "cg.asset.transcode.v1", Stage: "transcode", MaxDeliveryAttempts: 16,
		Owner: "team-media", HandleWithin: 8 * time.Hour,
		Subscriptions: []Subscription{{AssetPostprocess, []string{TagTranscodeProxy, TagThumbnail, TagWaveform}}}}
	// GroupReview has a group of its own so that a slow or unavailable
	// reviewer never holds back the probe or the derivatives.
	GroupReview = Group{Name: "cg.asset.review.v1", Stage: "review", MaxDeliveryAttempts: 16,
		Owner: "team-media", HandleWithin: 4 * time.Hour,
		Subscriptions: []Subscription{{AssetPostprocess, []string{TagReview}}, {AssetPostprocessDelay, []string{TagReview}}}}
	GroupRender = Group{Name: "cg.render.export.v1", Stage: "render", MaxDeliveryAttempts: 8,
		Owner: "team-media", HandleWithin: 8 * time.Hour,
		Subscriptions: []Subscription{{RenderExport, []string{EventRenderRequested}}, {RenderExportDelay, []string{EventRenderRequested}}}}
	GroupSettle = Group{Name: "cg.billing.settle.v1", Stage: "settle", MaxDeliveryAttempts: 16,
		Owner: "team-billing", HandleWithin: 2 * time.Hour,
		Subscriptions: []Subscription{{BillingSettle, []string{EventSettleRequested}}}}
	GroupNotify = Group{Name: "cg.notification.push.v1", Stage: "notify", MaxDeliveryAttempts: 8, Orderly: true,
		Owner: "team-notifications", HandleWithin: 24 * time.Hour,
		Subscriptions: []Subscription{{GenerationStateFIFO, []string{EventTaskStateChanged}}}}
	GroupReconcile = Group{Name: "cg.reconcile.v1", Stage: "reconcile", MaxDeliveryAttempts: 16,
		Owner: "team-generation", HandleWithin: 4 * time.Hour,
		Subscriptions: []Subscription{{ReconcileDelay, []string{EventReconcileDue}}}}
)

// DLQDrain is the group `adapter dlq drain` reads dead-letter topics with.
// It is no stage's group. Its maximum is far above every stage's because the
// broker keeps counting a message's attempts in the dead-letter topic: a
// lower one would send drained messages on to the drain group's own DLQ.
var DLQDrain = Group{Name: "cg.dlq.drain.v1", Stage: "", MaxDeliveryAttempts: 1000}

// Groups lists every consumer group.
func Groups() []Group {
	return []Group{
		GroupSubmit, GroupPoll, GroupCallback, GroupFetch, GroupProbe,
		GroupTranscode, GroupReview, GroupRender, GroupSettle, GroupNotify, GroupReconcile,
	}
}

// AllGroups lists every group topics apply must create: the stages' groups
// and the DLQ drain group.
func AllGroups() []Group { return append(Groups(), DLQDrain) }

// GroupByName finds a group by its firm name or its broker name.
func GroupByName(name string) (Group, error) {
	for _, g := range Groups() {
		if g.Name == name || g.BrokerName() == name {
			return g, nil
		}
	}
	return Group{}, fmt.Errorf("unknown consumer group %q (known: %s)", name, strings.Join(groupNames(), ", "))
}

// TopicByName finds a topic by its firm name or its broker name.
func TopicByName(name string) (Topic, bool) {
	for _, t := range Topics() {
		if t.Name == name || t.BrokerName() == name {
			return t, true
		}
	}
	return Topic{}, false
}

// Takes reports whether g receives messages with tag on topic t.
func (g Group) Takes(t Topic, tag string) bool {
	for _, s := range g.Subscriptions {
		if s.Topic.Name == t.Name && (len(s.Tags) == 0 || slices.Contains(s.Tags, tag)) {
			return true
		}
	}
	return false
}

// Stages lists the stage names that handle a consumer group, without repeats,
// in catalog order.
func Stages() []string {
	var stages []string
	seen := map[string]bool{}
	for _, g := range Groups() {
		if !seen[g.Stage] {
			seen[g.Stage] = true
			stages = append(stages, g.Stage)
		}
	}
	return stages
}

func groupNames() []string {
	names := make([]string, 0, len(Groups()))
	for _, g := range Groups() {
		names = append(names, g.Name)
	}
	return names
}

// BrokerName maps a firm topic or group name to one RocketMQ accepts.
func BrokerName(name string) string { return strings.ReplaceAll(name, ".", "_") }
