package task

import (
	"context"
	"errors"
	"fmt"
	"github.com/aivedio/pipeline/shared/pg"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// ErrNotFound: no task has that id (for that tenant).
var ErrNotFound = errors.New("task not found")

// Task is one generation_tasks row.
type Task struct {
	ID              uuid.UUID
	TenantID        uuid.UUID
	IdempotencyKey  string
	RequestHash     []byte
	Model           string
	Prompt          string
	DurationSeconds int
	Resolution      string
	InputAssetIDs   []uuid.UUID
	Priority        int
	Status          Status
	Version         int64
	NextRetryAt     *time.Time
	NextPollAt      *time.Time
	DeadlineAt      *time.Time
	CancelRequested bool
	Progress        int
	ErrorCode       string
	ErrorMessage    string
	Provider        string
	ProviderJobID   string
	// MissingDerivatives lists the optional derivatives (THUMBNAIL,
	// WAVEFORM) the task finished without; retried in the background.
	MissingDerivatives []string
	CreatedAt          time.Time
	UpdatedAt          time.Time
}

// Querier runs queries: a pool, a connection or a transaction.
// Querier is what reads a task: a pool, a connection or a transaction.
type Querier = pg.Querier

const selectColumns = `task_id, tenant_id, client_idempotency_key, request_hash, model, prompt, duration_seconds,
	resolution, input_asset_ids, priority, status, version, next_retry_at, next_poll_at, deadline_at,
	cancel_requested, progress, coalesce(error_code, ''), coalesce(error_message, ''),
	coalesce(provider, ''), coalesce(provider_job_id, ''), missing_derivatives, created_at, updated_at`

func scan(row pgx.Row) (Task, error) {
	var t Task
	err := row.Scan(&t.ID, &t.TenantID, &t.IdempotencyKey, &t.RequestHash, &t.Model, &t.Prompt, &t.DurationSeconds,
		&t.Resolution, &t.InputAssetIDs, &t.Priority, &t.Status, &t.Version, &t.NextRetryAt, &t.NextPollAt, &t.DeadlineAt,
		&t.CancelRequested, &t.Progress, &t.ErrorCode, &t.ErrorMessage,
		&t.Provider, &t.ProviderJobID, &t.MissingDerivatives, &t.CreatedAt, &t.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Task{}, ErrNotFound
	}
	if err != nil {
		return Task{}, fmt.Errorf("read task: %w", err)
	}
	return t, nil
}

// Get reads a task.
func Get(ctx context.Context, q Querier, id uuid.UUID) (Task, error) {
	return scan(q.QueryRow(ctx, `SELECT `+selectColumns+` FROM generation_tasks WHERE task_id = $1`, id))
}

// GetForTenant reads a task only if tenantID owns it: another tenant's task
// is ErrNotFound, indistinguishable from a task that does not exist.
func GetForTenant(ctx context.Context, q Querier, tenantID, id uuid.UUID) (Task, error) {
	return scan(q.QueryRow(ctx, `SELECT `+selectColumns+` FROM generation_tasks WHERE task_id = $1 AND tenant_id = $2`, id, tenantID))
}

// Lock reads a task and locks its row until tx ends, so that work which
// decides from several rows (the last derivative completing a task)
// serialises with every other change to it.
func Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Task, error) {
	return scan(tx.QueryRow(ctx, `SELECT `+selectColumns+` FROM generation_tasks WHERE task_id = $1 FOR UPDATE`, id))
}
