package task

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
)

// Message is an event payload that names its event type and its route, so
// that emitting it takes no strings (the way river's JobArgs name their
// kind and insert options).
type Message interface {
	EventType() string
	// Route is the topic and tag of the event: sent now, or (delayed) due
	// at a later time. An empty tag is the event type.
	Route(delayed bool) (catalog.Topic, string)
}

// Aggregate is what an event is about: a task, or an asset a tenant
// uploaded (which no task owns).
type Aggregate struct {
	Type     string // [AggregateType], [AssetAggregateType] or [RenderAggregateType]
	ID       uuid.UUID
	TenantID uuid.UUID
}

// AssetAggregateType is the aggregate_type of events about an uploaded
// asset.
const AssetAggregateType = "asset"

// RenderAggregateType is the aggregate_type of events about a render.
const RenderAggregateType = "render"

// Aggregate is the task as the aggregate of its events.
func (t Task) Aggregate() Aggregate {
	return Aggregate{Type: AggregateType, ID: t.ID, TenantID: t.TenantID}
}

// Emit builds the outbox event of p about task t, caused by o, to be
// delivered now. A payload that only travels on a DELAY topic (a poll, a
// reconcile look) is due at once.
func (o Origin) Emit(t Task, p Message) (outbox.Event, error) {
	return o.emit(t.Aggregate(), p, false, time.Now())
}

// EmitAt builds the outbox event of p about task t, caused by o, due at
// at: on the payload's DELAY topic, which the broker holds until then.
func (o Origin) EmitAt(t Task, p Message, at time.Time) (outbox.Event, error) {
	return o.emit(t.Aggregate(), p, true, at)
}

// EmitFor builds the outbox event of p about a, caused by o, to be
// delivered now: for events whose aggregate is not a task.
func (o Origin) EmitFor(a Aggregate, p Message) (outbox.Event, error) {
	return o.emit(a, p, false, time.Now())
}

// EmitForAt is EmitFor due at at, on the payload's DELAY topic.
func (o Origin) EmitForAt(a Aggregate, p Message, at time.Time) (outbox.Event, error) {
	return o.emit(a, p, true, at)
}

func (o Origin) emit(a Aggregate, p Message, delayed bool, at time.Time) (outbox.Event, error) {
	topic, tag := p.Route(delayed)
	correlation := o.CorrelationID
	if correlation == "" {
		correlation = a.ID.String() // the call that creates the aggregate starts the chain
	}
	env, err := envelope.New(envelope.NewParams{
		EventType:     p.EventType(),
		Producer:      o.Producer,
		AggregateType: a.Type,
		AggregateID:   a.ID.String(),
		TenantID:      a.TenantID.String(),
		TraceID:       o.TraceID,
		CorrelationID: correlation,
		CausationID:   o.EventID,
		Payload:       p,
	})
	if err != nil {
		return outbox.Event{}, fmt.Errorf("build %s event: %w", p.EventType(), err)
	}
	ev := outbox.Event{Envelope: env, Topic: topic, Tag: tag}
	switch topic.Type {
	case catalog.FIFO:
		ev.MessageGroup = a.ID.String()
	case catalog.Delay:
		ev.DeliverAt = at
	}
	return ev, nil
}

// delayedOr picks a payload's DELAY topic when it is due later.
func delayedOr(delayed bool, now, later catalog.Topic) catalog.Topic {
	if delayed {
		return later
	}
	return now
}

// EventType names the payload's event.
func (SubmitRequested) EventType() string { return catalog.EventSubmitRequested }

// Route: generation.submit now, generation.submit.delay for a resubmit
// after a wait.
func (SubmitRequested) Route(delayed bool) (catalog.Topic, string) {
	return delayedOr(delayed, catalog.GenerationSubmit, catalog.GenerationSubmitDelay), ""
}

// EventType names the payload's event.
func (PollDue) EventType() string { return catalog.EventPollDue }

// Route: a poll always rides the poll DELAY topic.
func (PollDue) Route(bool) (catalog.Topic, string) { return catalog.GenerationPollDelay, "" }

// EventType names the payload's event.
func (CallbackReceived) EventType() string { return catalog.EventCallbackReceived }

// Route: the callback topic; a callback is never delayed.
func (CallbackReceived) Route(bool) (catalog.Topic, string) { return catalog.GenerationCallback, "" }

// EventType names the payload's event.
func (FetchRequested) EventType() string { return catalog.EventFetchRequested }

// Route: asset.fetch now, asset.fetch.delay for a fetch put off because
// the output was not ready.
func (FetchRequested) Route(delayed bool) (catalog.Topic, string) {
	return delayedOr(delayed, catalog.AssetFetch, catalog.AssetFetchDelay), ""
}

// EventType names the payload's event.
func (Postprocess) EventType() string { return catalog.EventPostprocess }

// Route: asset.postprocess, tagged with the step so that each media
// consumer group takes its own; asset.postprocess.delay for a step put off
// by a business wait (a review while the reviewer is unavailable).
func (p Postprocess) Route(delayed bool) (catalog.Topic, string) {
	return delayedOr(delayed, catalog.AssetPostprocess, catalog.AssetPostprocessDelay), p.Step
}

// EventType names the payload's event.
func (SettleRequested) EventType() string { return catalog.EventSettleRequested }

// Route: billing.settle.
func (SettleRequested) Route(bool) (catalog.Topic, string) { return catalog.BillingSettle, "" }

// EventType names the payload's event.
func (StateChanged) EventType() string { return catalog.EventTaskStateChanged }

// Route: the FIFO state topic, grouped by task.
func (StateChanged) Route(bool) (catalog.Topic, string) { return catalog.GenerationStateFIFO, "" }

// EventType names the payload's event.
func (RenderRequested) EventType() string { return catalog.EventRenderRequested }

// Route: render.export.
func (RenderRequested) Route(delayed bool) (catalog.Topic, string) {
	return delayedOr(delayed, catalog.RenderExport, catalog.RenderExportDelay), ""
}

// Render steps ([RenderRequested]).
const (
	RenderStart = "start"
	RenderChunk = "chunk"
	RenderJoin  = "join"
)

// EventType names the payload's event.
func (ReconcileDue) EventType() string { return catalog.EventReconcileDue }

// Route: a reconcile look always rides the reconcile DELAY topic.
func (ReconcileDue) Route(bool) (catalog.Topic, string) { return catalog.ReconcileDelay, "" }
