package replay_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// TestReplayStepsAndEffectsAreCounted: a plan, its approval and one
// execution (executed twice) count once each, and what the replayed event
// did at its consumer is counted there: applied once, then a duplicate.
//
// Not parallel: it reads process-wide counters.
func TestReplayStepsAndEffectsAreCounted(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	tk, _ := b.taskAt(t, b.tenant(t), task.Succeeded)
	settle := event(t, tk, catalog.EventSettleRequested, task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded})
	b.quarantine(t, deadLetter(t, catalog.GroupSettle, settle))
	before := counts(t)

	plan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(settle.EventID)}, "alice")
	require.NoError(t, err)
	_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
	require.NoError(t, err)
	for range 2 {
		_, err = b.desk.Execute(ctx, plan.ReplayID, "carol")
		require.NoError(t, err)
	}
	sent := b.replays(t, settle.EventID)
	require.Len(t, sent, 1)
	group := "cg.metrics." + uuid.NewString()[:8]
	for range 2 {
		_, err := inbox.Do(ctx, b.pool, group, sent[0].Envelope, func(context.Context, pgx.Tx) (inbox.Result, error) { return inbox.Applied, nil })
		require.NoError(t, err)
	}
	after := counts(t)
	for _, step := range []string{"planned", "approved", "executed"} {
		require.Equal(t, before["step="+step]+1, after["step="+step], step)
	}
	require.Equal(t, 1.0, after["consumer_group="+group+",outcome=applied"])
	require.Equal(t, 1.0, after["consumer_group="+group+",outcome=duplicate"])
}

// counts reads aivedio_replays_total and aivedio_replayed_events_total by
// their labels.
func counts(t *testing.T) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(replay.Collector(), inbox.Collector())
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != "aivedio_replays_total" && mf.GetName() != "aivedio_replayed_events_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetName() + "=" + l.GetValue()
			}
			out[key] = m.GetCounter().GetValue()
		}
	}
	return out
}
