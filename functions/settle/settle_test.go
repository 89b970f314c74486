package settle_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

type testBundle struct {
	pool *pgxpool.Pool
	fn   *stage.Function
	task task.Task
}

// setup makes a task in status, holding a reservation when reserve is
// true, and a settle function.
func setup(t *testing.T, status task.Status, reserve bool) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t)}
	b.task = taskIn(t, b.pool, status, reserve)
	b.fn = settle.New(settle.Params{Pool: b.pool})
	return b
}

// deliver hands the function a settle request naming status; the stage
// decides from the task's state, not from it.
func (b *testBundle) deliver(t *testing.T, eventID string, status task.Status) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventSettleRequested,
		task.SettleRequested{TaskID: b.task.ID, Status: status}))
	return err
}

func (b *testBundle) account(t *testing.T) billing.Account {
	t.Helper()
	a, err := billing.GetAccount(t.Context(), b.pool, b.task.TenantID)
	require.NoError(t, err)
	return a
}

func TestSucceededIsCapturedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, task.Succeeded, true)
	// Distinct settle events (a retried transition's, a reconciler's, a
	// replay's), some at the same time: one capture.
	ids := make([]string, 6)
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i := range ids {
		ids[i] = uuid.NewString()
		wg.Go(func() { errs[i] = b.deliver(t, ids[i], task.Succeeded) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, b.deliver(t, uuid.NewString(), task.Succeeded))

	require.Equal(t, billing.Captured, reservationStatus(t, b.pool, b.task.ID))
	n, sum := captures(t, b.pool, b.task.TenantID)
	require.Equal(t, 1, n)
	require.Equal(t, int64(-reserved), sum)
	require.Equal(t, billing.Account{TenantID: b.task.TenantID, Balance: credits - reserved, Reserved: 0}, b.account(t))
	applied := 0
	for _, id := range ids {
		switch inboxResult(t, b.pool, catalog.GroupSettle.Name, id) {
		case "APPLIED":
			applied++
		case "STALE_NOOP":
		default:
			t.Fatalf("event %s was not recorded", id)
		}
	}
	require.Equal(t, 1, applied, "one event settled, the others found it settled")
}

func TestCanceledWithOutputIsCaptured(t *testing.T) {
	t.Parallel()
	b := setup(t, task.CanceledWithOut, true)
	require.NoError(t, b.deliver(t, uuid.NewString(), task.CanceledWithOut))
	require.Equal(t, billing.Captured, reservationStatus(t, b.pool, b.task.ID))
	require.Equal(t, int64(credits-reserved), b.account(t).Balance)
}

func TestFailedIsReleased(t *testing.T) {
	t.Parallel()
	b := setup(t, task.Failed, true)
	require.NoError(t, b.deliver(t, uuid.NewString(), task.Failed))
	require.NoError(t, b.deliver(t, uuid.NewString(), task.Failed))

	require.Equal(t, billing.Released, reservationStatus(t, b.pool, b.task.ID))
	n, _ := captures(t, b.pool, b.task.TenantID)
	require.Zero(t, n, "nothing charged")
	require.Equal(t, billing.Account{TenantID: b.task.TenantID, Balance: credits, Reserved: 0}, b.account(t))
}

func TestTheTaskNotTheMessageDecides(t *testing.T) {
	t.Parallel()
	// A late message claiming success for a task that failed.
	b := setup(t, task.Failed, true)
	require.NoError(t, b.deliver(t, uuid.NewString(), task.Succeeded))
	require.Equal(t, billing.Released, reservationStatus(t, b.pool, b.task.ID))
	require.Equal(t, int64(credits), b.account(t).Balance)
}

func TestUnfinishedTaskIsNotSettled(t *testing.T) {
	t.Parallel()
	for _, status := range []task.Status{task.ProviderRunning, task.NeedsAttention} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, status, true)
			id := uuid.NewString()
			require.NoError(t, b.deliver(t, id, task.Succeeded))
			require.Equal(t, billing.Held, reservationStatus(t, b.pool, b.task.ID))
			require.Equal(t, billing.Account{TenantID: b.task.TenantID, Balance: credits, Reserved: reserved}, b.account(t))
			require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupSettle.Name, id))
		})
	}
}

func TestTaskWithoutReservationIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, task.Succeeded, false)
	id := uuid.NewString()
	err := b.deliver(t, id, task.Succeeded)
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err), "quarantined, not retried: %v", err)
	require.ErrorContains(t, err, "no reservation")
	require.Empty(t, inboxResult(t, b.pool, catalog.GroupSettle.Name, id))
	require.Equal(t, int64(credits), b.account(t).Balance)
}

func TestUnknownTaskIsPermanent(t *testing.T) {
	t.Parallel()
	b := setup(t, task.Succeeded, true)
	ghost := b.task
	ghost.ID = uuid.New()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, ghost, uuid.NewString(), catalog.EventSettleRequested,
		task.SettleRequested{TaskID: ghost.ID, Status: task.Succeeded}))
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
}

func TestAnotherTenantsSettleIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, task.Succeeded, true)
	other := b.task
	other.TenantID = uuid.New()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, other, uuid.NewString(), catalog.EventSettleRequested,
		task.SettleRequested{TaskID: b.task.ID, Status: task.Succeeded}))
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	require.Equal(t, billing.Held, reservationStatus(t, b.pool, b.task.ID))
}

// TestPayloadOfANewerProducer: within one schema version a producer a
// release ahead may add a field; this release applies the event. A
// required field that is missing stays permanent.
func TestPayloadOfANewerProducer(t *testing.T) {
	t.Parallel()
	b := setup(t, task.Succeeded, true)
	id := uuid.NewString()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, id, catalog.EventSettleRequested,
		map[string]any{"task_id": b.task.ID, "status": task.Succeeded, "invoice_hint": "2026-12"}))
	require.NoError(t, err)
	require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupSettle.Name, id))
	require.Equal(t, billing.Captured, reservationStatus(t, b.pool, b.task.ID))

	_, err = b.fn.Handle(t.Context(), cloudEvent(t, b.task, uuid.NewString(), catalog.EventSettleRequested,
		map[string]any{"status": task.Succeeded, "invoice_hint": "2026-12"}))
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	require.ErrorContains(t, err, "payload.task_id: is required")
}

// TestAContentRejectionIsChargedOnlyWhenTheProviderMadeTheVideo: the
// provider's moderation refusal (content_rejected: it made nothing it
// bills) is released; our review's rejection of a video the provider made
// and billed (review.content_rejected) is captured.
func TestAContentRejectionIsChargedOnlyWhenTheProviderMadeTheVideo(t *testing.T) {
	t.Parallel()
	for code, want := range map[string]string{
		provider.CodeContentRejected: billing.Released,
		task.ErrContentRejected:      billing.Captured,
	} {
		b := setup(t, task.Failed, true)
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET error_code = $2 WHERE task_id = $1`, b.task.ID, code)
		require.NoError(t, err)
		require.NoError(t, b.deliver(t, uuid.NewString(), task.Failed))
		require.Equal(t, want, reservationStatus(t, b.pool, b.task.ID), code)
	}
}
