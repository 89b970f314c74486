package inbox_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
)

// TestEndToEndLatencyIsObservedOnApply: an event that occurred 2 s ago
// and is applied adds one observation of at least 2 s under its event type
// and consumer group; its duplicate adds none.
func TestEndToEndLatencyIsObservedOnApply(t *testing.T) {
	t.Parallel()
	b := setup(t)
	group := "cg.latency." + uuid.NewString()[:8]
	ev, err := envelope.New(envelope.NewParams{EventType: "test.latency.happened", Producer: "api", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), OccurredAt: time.Now().Add(-2 * time.Second), Payload: map[string]any{"x": 1}})
	require.NoError(t, err)
	h := &handler{}
	for range 2 {
		_, err := inbox.Do(t.Context(), b.pool, group, ev, h.fn(ev))
		require.NoError(t, err)
	}
	count, sum := latency(t, ev.EventType, group)
	require.EqualValues(t, 1, count, "the duplicate is not observed")
	require.GreaterOrEqual(t, sum, 2.0)
}

func latency(t *testing.T, eventType, group string) (uint64, float64) {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(inbox.Collector())
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "aivedio_event_end_to_end_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["event_type"] == eventType && labels["consumer_group"] == group {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}
