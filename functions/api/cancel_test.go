package api_test

import (
	"net/http"
	"testing"
	"time"

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
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', provider_job_id = 'job-1', next_poll_at = now() + interval '1 minute' WHERE task_id = $1`, id)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `INSERT INTO task_attempts (task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status)
		VALUES ($1::uuid, 1, 'sim', 'm', $1::uuid::text || '-1', 'crid', 'job-1', 'ACCEPTED')`, id)
	require.NoError(t, err)

	for range 2 { // a repeat changes nothing more
		r := b.cancel(t, key, id)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		got := r.json(t)
		require.Equal(t, "PROVIDER_RUNNING", got["status"])
		require.EqualValues(t, running.Version, got["version"])
		require.Contains(t, got["message"], "CANCELED_WITH_OUTPUT")
	}
	cur, err := task.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	require.True(t, cur.CancelRequested)
	require.WithinDuration(t, time.Now(), *cur.NextPollAt, 5*time.Second, "the poll chain moved to now")
	require.Len(t, b.outboxPayloads(t, id, catalog.EventPollDue), 1, "one immediate poll asks the provider to stop")
	require.Equal(t, running.Version, cur.Version, "a flag is not a transition")
	require.Empty(t, b.outboxPayloads(t, id, catalog.EventSettleRequested))

	// The stages' next transition keeps the flag.
	next := b.move(t, id, task.Fetching)
	require.True(t, next.CancelRequested)
}
