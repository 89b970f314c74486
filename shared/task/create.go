package task

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// New is a task to create.
type New struct {
	TenantID        uuid.UUID
	IdempotencyKey  string
	RequestHash     []byte // SHA-256 of the canonical request
	Model           string
	Prompt          string
	DurationSeconds int
	Resolution      string
	InputAssetIDs   []uuid.UUID
	Priority        int
}

// ErrIdempotencyConflict: the tenant already used the idempotency key for a
// different request.
var ErrIdempotencyConflict = errors.New("idempotency key already used with a different request")

// Create inserts a QUEUED task through tx with its first timeline row and
// task.state.changed event; the caller writes the task's next events in
// the same transaction once its own checks passed. When the tenant already has a task under the same
// idempotency key, Create returns that task with created false and writes
// nothing; a different request hash is [ErrIdempotencyConflict].
func Create(ctx context.Context, tx pgx.Tx, o Origin, n New) (t Task, created bool, err error) {
	inputs := n.InputAssetIDs
	if inputs == nil {
		inputs = []uuid.UUID{}
	}
	t, err = scan(tx.QueryRow(ctx, `INSERT INTO generation_tasks
		(tenant_id, client_idempotency_key, request_hash, model, prompt, duration_seconds, resolution, input_asset_ids, priority)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant_id, client_idempotency_key) DO NOTHING
		RETURNING `+selectColumns,
		n.TenantID, n.IdempotencyKey, n.RequestHash, n.Model, n.Prompt, n.DurationSeconds, n.Resolution, inputs, n.Priority))
	if errors.Is(err, ErrNotFound) {
		existing, err := scan(tx.QueryRow(ctx, `SELECT `+selectColumns+` FROM generation_tasks
			WHERE tenant_id = $1 AND client_idempotency_key = $2`, n.TenantID, n.IdempotencyKey))
		if err != nil {
			return Task{}, false, fmt.Errorf("read task of idempotency key: %w", err)
		}
		if string(existing.RequestHash) != string(n.RequestHash) {
			return existing, false, ErrIdempotencyConflict
		}
		return existing, false, nil
	}
	if err != nil {
		return Task{}, false, fmt.Errorf("create task: %w", err)
	}
	if err := record(ctx, tx, o, "", t, "created", nil); err != nil {
		return Task{}, false, err
	}
	return t, true, nil
}
