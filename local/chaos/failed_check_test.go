package main

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/dbtest"
)

// TestFailedCheck: tasks FAILED for what the run's faults inject (a failed
// job, a content refusal) hold; one FAILED for anything else, such as
// retries that ran out, breaks the invariant and is named.
func TestFailedCheck(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	var providers []*simProvider
	for i := range 2 {
		sim, err := providersim.New(simOptions(int64(i), 40), slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		t.Cleanup(func() { _ = sim.Close() })
		providers = append(providers, &simProvider{sim: sim})
	}
	reviewer, err := reviewsim.New(reviewOptions(1), slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { _ = reviewer.Close() })
	w := &world{pool: pool, providers: providers, reviewer: reviewer}
	fail := func(code string) {
		cur := stagetest.NewTask(t, pool, nil)
		_, err := pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'FAILED', error_code = $2 WHERE task_id = $1`, cur.ID, code)
		require.NoError(t, err)
	}
	check := func() invariant {
		r := &report{}
		require.NoError(t, w.checkFailed(t.Context(), r))
		require.Len(t, r.Invariants, 1)
		return r.Invariants[0]
	}

	fail("provider.job_failed")
	fail("content_rejected")
	fail("review.content_rejected")
	got := check()
	require.True(t, got.Held, got.Detail)

	fail("provider.retries_exhausted")
	got = check()
	require.False(t, got.Held, got.Detail)
	require.Contains(t, got.Detail, `"provider.retries_exhausted" ×1 FAILED for a reason the faults do not explain`)
}
