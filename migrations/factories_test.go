package migrations_test

import (
	"context"
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// querier is what the factories need: a pgx.Tx or a *pgxpool.Pool.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func newID(t *testing.T) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	return id
}

func hash(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func newTenant(t *testing.T, q querier) uuid.UUID {
	t.Helper()
	id := newID(t)
	_, err := q.Exec(t.Context(), `INSERT INTO tenants (tenant_id, name) VALUES ($1, $2)`, id, "tenant "+id.String())
	require.NoError(t, err)
	return id
}

// newCreditAccount opens tenantID's account with balance and returns tenantID.
func newCreditAccount(t *testing.T, q querier, tenantID uuid.UUID, balance int64) uuid.UUID {
	t.Helper()
	_, err := q.Exec(t.Context(), `INSERT INTO credit_accounts (tenant_id, balance) VALUES ($1, $2)`, tenantID, balance)
	require.NoError(t, err)
	return tenantID
}

func insertTask(ctx context.Context, q querier, tenantID uuid.UUID, idempotencyKey, status string) (uuid.UUID, error) {
	var id uuid.UUID
	err := q.QueryRow(ctx, `INSERT INTO generation_tasks
		(tenant_id, client_idempotency_key, request_hash, model, prompt, duration_seconds, resolution, status)
		VALUES ($1, $2, $3, 'sim-video-1', 'a lighthouse at dusk', 5, '1280x720', $4)
		RETURNING task_id`,
		tenantID, idempotencyKey, hash(idempotencyKey), status).Scan(&id)
	return id, err
}

func newTask(t *testing.T, q querier, tenantID uuid.UUID) uuid.UUID {
	t.Helper()
	id, err := insertTask(t.Context(), q, tenantID, newID(t).String(), "QUEUED")
	require.NoError(t, err)
	return id
}

func insertAttempt(ctx context.Context, q querier, taskID uuid.UUID, attemptNo int, idempotencyKey string) error {
	_, err := q.Exec(ctx, `INSERT INTO task_attempts
		(task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id)
		VALUES ($1, $2, 'sim', 'sim-video-1', $3, $4)`,
		taskID, attemptNo, idempotencyKey, uuid.NewString())
	return err
}

func insertInbox(ctx context.Context, q querier, consumer string, eventID uuid.UUID) error {
	_, err := q.Exec(ctx, `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
		VALUES ($1, $2, 'APPLIED', $3)`, consumer, eventID, hash(eventID.String()))
	return err
}

func insertLedger(ctx context.Context, q querier, tenantID uuid.UUID, businessType, businessID string) error {
	_, err := q.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, ledger_business_type, business_id, amount, balance_after)
		VALUES ($1, $2, $3, -10, 990)`, tenantID, businessType, businessID)
	return err
}

func insertReservation(ctx context.Context, q querier, tenantID, taskID uuid.UUID) error {
	_, err := q.Exec(ctx, `INSERT INTO credit_reservations (task_id, tenant_id, amount) VALUES ($1, $2, 10)`, taskID, tenantID)
	return err
}

func insertQuarantine(ctx context.Context, q querier, consumer, eventID string) error {
	_, err := q.Exec(ctx, `INSERT INTO message_quarantine
		(consumer_name, event_id, message_id, topic, error_class, error_code, category, delivery_attempt, body, source)
		VALUES ($1, $2, gen_random_uuid()::text, 'asset.fetch', 'PERMANENT', 'ENVELOPE_INVALID', 'DATA_DEFECT', 1, '\x00', 'ADAPTER')`, consumer, eventID)
	return err
}

// insertAsset inserts an asset of kind with a unique object key; derived
// kinds need sourceID.
func insertAsset(ctx context.Context, q querier, tenantID uuid.UUID, kind string, sourceID *uuid.UUID) (uuid.UUID, error) {
	var id uuid.UUID
	key := "tenants/" + tenantID.String() + "/assets/" + uuid.NewString()
	err := q.QueryRow(ctx, `INSERT INTO assets
		(tenant_id, source_asset_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, $3, $4, $5, 1024, 'video/mp4')
		RETURNING asset_id`,
		tenantID, sourceID, kind, key, hash(key)).Scan(&id)
	return id, err
}

func newAsset(t *testing.T, q querier, tenantID uuid.UUID, kind string, sourceID *uuid.UUID) uuid.UUID {
	t.Helper()
	id, err := insertAsset(t.Context(), q, tenantID, kind, sourceID)
	require.NoError(t, err)
	return id
}

// newOutboxEvent inserts a pending outbox event and returns its id.
func newOutboxEvent(t *testing.T, q querier) uuid.UUID {
	t.Helper()
	id, taskID := newID(t), newID(t)
	_, err := q.Exec(t.Context(), `INSERT INTO outbox_events
		(event_id, event_type, producer, topic, tag, aggregate_type, aggregate_id, tenant_id, payload, occurred_at)
		VALUES ($1, 'generation.submit.requested', 'api', 'generation.submit', 'generation.submit.requested',
			'generation_task', $2, $3, $4, now())`,
		id, taskID.String(), newID(t), map[string]any{"task_id": taskID.String(), "version": 1})
	require.NoError(t, err)
	return id
}
