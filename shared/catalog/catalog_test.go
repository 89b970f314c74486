package catalog_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
)

// RocketMQ's TopicValidator pattern for topic and group names.
var brokerLegal = regexp.MustCompile(`^[%|a-zA-Z0-9_-]+$`)

func TestBrokerNamesAreLegal(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	check := func(firm, broker string) {
		require.Regexp(t, brokerLegal, broker, "broker name of %q", firm)
		require.LessOrEqual(t, len(broker), 127, "RocketMQ limits names to 127 characters")
		if other, dup := seen[broker]; dup {
			t.Fatalf("%q and %q map to the same broker name %q", firm, other, broker)
		}
		seen[broker] = firm
	}
	for _, topic := range catalog.Topics() {
		check(topic.Name, topic.BrokerName())
	}
	for _, g := range catalog.AllGroups() {
		check(g.Name, g.BrokerName())
		require.Regexp(t, brokerLegal, g.DLQTopic())
	}
	for _, g := range catalog.Groups() {
		require.Greater(t, catalog.DLQDrain.MaxDeliveryAttempts, 4*g.MaxDeliveryAttempts, "the drain group must outlast every stage's attempts")
	}
}

func TestGroupsSubscribeToCatalogTopics(t *testing.T) {
	t.Parallel()
	topics := map[catalog.Topic]bool{}
	for _, topic := range catalog.Topics() {
		topics[topic] = true
	}
	for _, g := range catalog.Groups() {
		require.NotEmpty(t, g.Subscriptions, g.Name)
		require.Greater(t, g.MaxDeliveryAttempts, 1, g.Name)
		// Seed 7.12.2: every core group's dead letters have an owner and a deadline.
		require.Regexp(t, `^team-[a-z]+$`, g.Owner, g.Name)
		require.GreaterOrEqual(t, g.HandleWithin, time.Hour, g.Name)
		require.LessOrEqual(t, g.HandleWithin, 7*24*time.Hour, "%s: past the replay window a quarantined message cannot be replayed", g.Name)
		for _, s := range g.Subscriptions {
			require.True(t, topics[s.Topic], "%s reads %s, which is not in the catalog", g.Name, s.Topic.Name)
			// An orderly group is what makes a FIFO topic deliver in order.
			require.Equal(t, s.Topic.Type == catalog.FIFO, g.Orderly, g.Name)
		}
	}
	require.Equal(t, []string{"submit", "poll", "fetch", "probe", "transcode", "review", "render", "settle", "notify", "reconcile"}, catalog.Stages())
}

func TestGroupByName(t *testing.T) {
	t.Parallel()
	g, err := catalog.GroupByName("cg.asset.transcode.v1")
	require.NoError(t, err)
	require.Equal(t, "TRANSCODE_PROXY||THUMBNAIL||WAVEFORM", g.Subscriptions[0].FilterExpression())
	byBroker, err := catalog.GroupByName("cg_asset_transcode_v1")
	require.NoError(t, err)
	require.Equal(t, g.Name, byBroker.Name)
	_, err = catalog.GroupByName("cg.nope")
	require.ErrorContains(t, err, `unknown consumer group "cg.nope"`)
}

// TestDerivativeKinds: each derivative step makes one asset kind, and the
// kind leads back to its step; the probe and the source make none.
func TestDerivativeKinds(t *testing.T) {
	for _, step := range []string{catalog.TagTranscodeProxy, catalog.TagThumbnail, catalog.TagWaveform} {
		kind := catalog.DerivativeKind(step)
		if kind == "" || catalog.DerivativeStep(kind) != step {
			t.Errorf("step %s makes kind %q, which leads back to step %q", step, kind, catalog.DerivativeStep(kind))
		}
	}
	if k := catalog.DerivativeKind(catalog.TagProbe); k != "" {
		t.Errorf("the probe makes kind %q, want none", k)
	}
	if s := catalog.DerivativeStep("SOURCE"); s != "" {
		t.Errorf("kind SOURCE is made by step %q, want none", s)
	}
}

func TestTopicByNameAndTakes(t *testing.T) {
	t.Parallel()
	for _, name := range []string{catalog.GenerationStateFIFO.Name, catalog.GenerationStateFIFO.BrokerName()} {
		got, ok := catalog.TopicByName(name)
		require.True(t, ok, name)
		require.Equal(t, catalog.GenerationStateFIFO, got)
	}
	_, ok := catalog.TopicByName("%DLQ%cg_asset_probe_v1")
	require.False(t, ok)

	require.True(t, catalog.GroupProbe.Takes(catalog.AssetPostprocess, catalog.TagProbe))
	require.False(t, catalog.GroupProbe.Takes(catalog.AssetPostprocess, catalog.TagThumbnail), "the transcode group's tag")
	require.False(t, catalog.GroupProbe.Takes(catalog.AssetFetch, catalog.TagProbe), "another topic")
}
