package settle_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/task"
)

// Helpers every stage test shares.
var (
	cloudEvent  = stagetest.CloudEvent
	statusOf    = stagetest.StatusOf
	inboxResult = stagetest.InboxResult
)

const (
	// credits is the tenant's starting balance, reserved what its task holds.
	credits  = stagetest.Credits
	reserved = 20
)

// paths are the transitions that take a new task to each state the tests
// need, as the stages would.
var paths = map[task.Status][]task.Transition{
	task.ProviderRunning: running,
	task.Succeeded:       append(running[:len(running):len(running)], task.Transition{To: task.Fetching}, task.Transition{To: task.MediaProcessing}, task.Transition{To: task.Succeeded}),
	task.Failed:          append(running[:len(running):len(running)], task.Transition{To: task.Failed, Set: task.Fields{ErrorCode: task.Ptr("provider.job_failed")}}),
	task.CanceledWithOut: append(running[:len(running):len(running)], task.Transition{To: task.CanceledWithOut}),
	task.NeedsAttention: {
		{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("fake")}},
		{To: task.Reconciling},
		{To: task.NeedsAttention},
	},
}

var running = []task.Transition{
	{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("fake")}},
	{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr("job-1")}},
}

// taskIn creates a tenant with credits and a task moved to status through
// the state machine; it holds a reservation when reserve is true.
func taskIn(t *testing.T, pool *pgxpool.Pool, status task.Status, reserve bool) task.Task {
	t.Helper()
	path, ok := paths[status]
	require.True(t, ok, "no path to %s", status)
	opts := &stagetest.TaskOpts{}
	if reserve {
		opts.Reserved = reserved
	}
	cur := stagetest.NewTask(t, pool, opts, path...)
	require.Equal(t, status, cur.Status)
	return cur
}

// reservationStatus is the status of a task's reservation.
func reservationStatus(t *testing.T, pool *pgxpool.Pool, taskID uuid.UUID) string {
	t.Helper()
	var status string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status FROM credit_reservations WHERE task_id = $1`, taskID).Scan(&status))
	return status
}

// captures counts the CAPTURE ledger entries of a tenant and sums them.
func captures(t *testing.T, pool *pgxpool.Pool, tenantID uuid.UUID) (n int, sum int64) {
	t.Helper()
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*), coalesce(sum(amount), 0) FROM credit_ledger
		WHERE tenant_id = $1 AND ledger_business_type = $2`, tenantID, billing.EntryCapture).Scan(&n, &sum))
	return n, sum
}
