package reconcile_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// A task waits for a scope that has room (its wake-up was lost): the
// waker hands it the slot and writes the repair, and the slot rebuilder
// then counts the woken task as a holder instead of giving its slot away.
func TestWaitlistWakerRepairsALostWakeUp(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	limiter := testLimiter(t)
	list := waitlist.New(b.pool, limiter, func(t task.Task, p string) slots.AcquireParams { return stage.GenerationSlots(t, p, scanJourney) }, "waitlist", nil)
	p := reconcile.Params{Pool: b.pool, Slots: limiter, Waitlist: list, Journey: scanJourney}
	waiting := b.stuckTask(t, task.WaitingRetry, 0)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return list.Join(t.Context(), tx, waiting, waitlist.Wait{Scope: "model:m", Provider: "sim", Reason: "no free slot"})
	}))

	n, err := reconcile.NewWaitlistWaker(p).RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var reason string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT reason FROM reconcile_repairs WHERE repair = $1 AND aggregate_id = $2`,
		reconcile.RepairWaitlistWake, waiting.ID.String()).Scan(&reason))
	require.Contains(t, reason, "model:m had room")
	n, err = reconcile.NewWaitlistWaker(p).RunOnce(t.Context())
	require.NoError(t, err)
	require.Zero(t, n, "woken once")

	// Another task's job runs on the model, so the rebuild resets its scope.
	b.stuckTask(t, task.ProviderRunning, 0)
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim' WHERE status = $1`, task.ProviderRunning)
	require.NoError(t, err)
	_, err = reconcile.NewSlotRebuilder(p).RunOnce(t.Context())
	require.NoError(t, err)
	held, err := limiter.InUse(t.Context(), "model:m")
	require.NoError(t, err)
	require.Equal(t, 2, held, "the rebuild counts the running job and keeps the woken task's slot")
}
