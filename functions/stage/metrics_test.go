package stage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
)

// workCounts gathers the stage histograms and returns the observations of
// one stage per outcome.
func workCounts(t *testing.T, name string) map[string]uint64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(stage.Collector())
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]uint64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["stage"] == name {
				out[labels["outcome"]] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return out
}

func TestHandleIsTimedByOutcome(t *testing.T) {
	t.Parallel()
	// A stage name of its own, and counts taken before and after: the
	// histogram is process-wide and outlives a test run with -count.
	const name = "timed-stage"
	before := workCounts(t, name)
	results := []error{nil, nil, outcome.Permanentf("tenant.mismatch", "task belongs to another tenant"), errors.New("database unavailable")}
	f := stage.New(stage.Params{
		Name:       name,
		EventTypes: []string{"generation.submit.requested"},
		Work: func(context.Context, envelope.Envelope) error {
			err := results[0]
			results = results[1:]
			return err
		},
	})
	ev, err := validEnvelope(t).ToCloudEvent()
	require.NoError(t, err)
	for range 4 {
		_, _ = f.Handle(t.Context(), ev)
	}
	other := ev.Clone()
	other.SetType("billing.settle.requested")
	_, _ = f.Handle(t.Context(), other)

	after := workCounts(t, name)
	for o, n := range map[string]uint64{stage.OutcomeOK: 2, stage.OutcomePermanent: 2, stage.OutcomeRetryable: 1} {
		require.Equal(t, n, after[o]-before[o], o)
	}
}
