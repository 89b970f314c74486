package api_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

func (b *testBundle) cancel(t *testing.T, key string, id uuid.UUID) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/generations/"+id.String()+"/cancel", key, "")
}

func TestCancelQueuedReleasesThroughTheSettleEvent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)

	r := b.cancel(t, key, id)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	got := r.json(t)
	require.Equal(t, "CANCELED", got["status"])
	require.EqualValues(t, 2, got["version"])

	settles := b.outboxPayloads(t, id, catalog.EventSettleRequested)
	require.Equal(t, []map[string]any{{"task_id": id.String(), "status": "CANCELED"}}, settles)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2 AND topic = $3`,
		id.String(), catalog.EventSettleRequested, catalog.BillingSettle.Name))
	require.Len(t, b.outboxPayloads(t, id, catalog.EventTaskStateChanged), 2)

	// The settle stage acts on the event: the reservation is released and
	// the credits are free again.
	acct, err := billing.GetAccount(t.Context(), b.pool, tenantID)
	require.NoError(t, err)
	require.EqualValues(t, 4*pricePerSecond, acct.Reserved, "held until the settle stage runs")
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		require.Equal(t, string(task.Canceled), settles[0]["status"])
		require.False(t, task.Canceled.Charged())
		_, err := billing.Release(t.Context(), tx, id)
		return err
	}))
	acct, err = billing.GetAccount(t.Context(), b.pool, tenantID)
	require.NoError(t, err)
	require.EqualValues(t, 0, acct.Reserved)
	require.EqualValues(t, 1000, acct.Balance)

	again := b.cancel(t, key, id)
	require.Equal(t, http.StatusConflict, again.status)
	require.Equal(t, "task_finished", again.errorCode(t))
	require.Contains(t, again.message(t), "CANCELED")
}

func TestCancelWaitingRetryIsImmediate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.WaitingRetry)

	r := b.cancel(t, key, id)
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, "CANCELED", r.json(t)["status"])
	require.Len(t, b.outboxPayloads(t, id, catalog.EventSettleRequested), 1)
}

func TestCancelTerminalIs409(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.ProviderRunning, task.Fetching, task.MediaProcessing, task.Succeeded)

	r := b.cancel(t, key, id)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, "task_finished", r.errorCode(t))
	require.Contains(t, r.message(t), "SUCCEEDED")
	require.Empty(t, b.outboxPayloads(t, id, catalog.EventSettleRequested))
}

func TestCancelWhileRunningRequestsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	running := b.move(t, id, task.Submitting, task.ProviderRunning)

	for range 2 { // a repeat changes nothing more
		r := b.cancel(t, key, id)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		got := r.json(t)
		require.Equal(t, "PROVIDER_RUNNING", got["status"])
		require.EqualValues(t, running.Version, got["version"])
		require.Contains(t, got["message"], "not implemented yet")
	}
	cur, err := task.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	require.True(t, cur.CancelRequested)
	require.Equal(t, running.Version, cur.Version, "a flag is not a transition")
	require.Empty(t, b.outboxPayloads(t, id, catalog.EventSettleRequested))

	// The stages' next transition keeps the flag.
	next := b.move(t, id, task.Fetching)
	require.True(t, next.CancelRequested)
}
