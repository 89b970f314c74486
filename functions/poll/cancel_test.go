package poll_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// requestCancel sets the cancel flag as the API does.
func (b *testBundle) requestCancel(t *testing.T) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET cancel_requested = true WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
}

// Cancel first, then completion: the provider stops the job before it
// finishes. CANCELED, the reservation released, the slot freed.
func TestCancelBeforeCompletionCancels(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusRunning))
	b.requestCancel(t)
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))

	got := b.reload(t)
	require.Equal(t, task.Canceled, got.Status)
	require.Equal(t, []string{jobID}, b.fake.cancels())
	settles := storedEvents(t, b.pool, catalog.EventSettleRequested)
	require.Len(t, settles, 1)
	status, _ := attemptState(t, b.pool, b.attemptID)
	require.Equal(t, "CANCELED", status)
	require.Zero(t, b.slotsHeld(t))
}

// Completion first, then cancel: the provider had already finished, so the
// output is fetched and the task will end CANCELED_WITH_OUTPUT, charged.
func TestCancelAfterCompletionKeepsTheOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusRunning))
	b.fake.cancelAnswer = func() (provider.Job, error) { return provider.Job{Status: provider.StatusSucceeded}, nil }
	b.requestCancel(t)
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))

	got := b.reload(t)
	require.Equal(t, task.Fetching, got.Status)
	require.True(t, got.CancelRequested, "the flag stays: the task ends CANCELED_WITH_OUTPUT")
	require.Len(t, storedEvents(t, b.pool, catalog.EventFetchRequested), 1)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSettleRequested))
}

// The success callback wins the race with the cancel's poll: the callback
// sees the flag too and cancels; the provider answers "already finished".
func TestCallbackAndCancelRace(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	b.fake.cancelAnswer = func() (provider.Job, error) { return provider.Job{Status: provider.StatusSucceeded}, nil }
	b.requestCancel(t)
	require.NoError(t, b.callback(t, uuid.NewString(), jobID))
	require.Equal(t, task.Fetching, b.reload(t).Status)
	// The cancel's own poll arrives late: stale, nothing more happens.
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))
	require.Equal(t, task.Fetching, b.reload(t).Status)
	require.Len(t, storedEvents(t, b.pool, catalog.EventFetchRequested), 1)
}

// The provider does not answer the cancel: CANCEL_RECONCILING with a
// delayed look, the slot still held (the job may still run).
func TestCancelUnansweredReconciles(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusRunning))
	b.fake.cancelAnswer = func() (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
	}
	b.requestCancel(t)
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))
	require.Equal(t, task.CancelReconciling, b.reload(t).Status)
	var reasons []string
	require.NoError(t, pgx.BeginFunc(context.WithoutCancel(t.Context()), b.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(t.Context(), `SELECT payload->>'reason' FROM outbox_events WHERE event_type = $1`, catalog.EventReconcileDue)
		if err != nil {
			return err
		}
		reasons, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	require.Equal(t, []string{"cancel"}, reasons)
	require.Equal(t, 1, b.slotsHeld(t))
}
