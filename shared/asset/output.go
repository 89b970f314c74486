package asset

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// NewOutput is a generation task's output stored in object storage, to be
// recorded.
type NewOutput struct {
	TenantID    uuid.UUID
	TaskID      uuid.UUID
	ObjectKey   string
	SHA256      []byte
	SizeBytes   int64
	ContentType string
}

// RecordOutput records a task's output (its SOURCE) PROCESSING, until the
// probe stage has seen it, and returns its id. A task has one output: a
// second record of it (a fetch delivered again) keeps the asset and its
// id and takes the new checksum and size, those of the object now stored
// under the same key.
func RecordOutput(ctx context.Context, q pg.Querier, n NewOutput) (uuid.UUID, error) {
	id := uuid.Must(uuid.NewV7())
	// The ON CONFLICT predicate repeats the one of the unique index
	// assets_task_output_key, literals included, so that it is inferred.
	err := q.QueryRow(ctx, `INSERT INTO assets (asset_id, tenant_id, task_id, kind, status, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (task_id) WHERE kind = 'SOURCE' AND task_id IS NOT NULL
		DO UPDATE SET checksum_sha256 = excluded.checksum_sha256, size_bytes = excluded.size_bytes
		RETURNING asset_id`, id, n.TenantID, n.TaskID, KindSource, Processing, n.ObjectKey, n.SHA256, n.SizeBytes, n.ContentType).Scan(&id)
	if err != nil {
		return uuid.Nil, fmt.Errorf("record output asset: %w", err)
	}
	return id, nil
}

// OutputOf is the id of task taskID's output (its SOURCE asset);
// [ErrNotFound] before it was stored.
func OutputOf(ctx context.Context, q pg.Querier, taskID uuid.UUID) (uuid.UUID, error) {
	var id uuid.UUID
	err := q.QueryRow(ctx, `SELECT asset_id FROM assets WHERE task_id = $1 AND kind = 'SOURCE'`, taskID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, fmt.Errorf("output of task %s: %w", taskID, ErrNotFound)
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("output of task %s: %w", taskID, err)
	}
	return id, nil
}

// OfTask lists every asset of task taskID (its output and the derivatives
// made from it), oldest first.
func OfTask(ctx context.Context, q pg.Querier, taskID uuid.UUID) ([]Asset, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM assets WHERE task_id = $1 ORDER BY created_at, asset_id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("read assets of task %s: %w", taskID, err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("read assets of task %s: %w", taskID, err)
	}
	return found, nil
}

// OfTenantTask is [OfTask] for a task of tenantID: another tenant's task
// has none.
func OfTenantTask(ctx context.Context, q pg.Querier, tenantID, taskID uuid.UUID) ([]Asset, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM assets WHERE task_id = $1 AND tenant_id = $2 ORDER BY created_at, asset_id`, taskID, tenantID)
	if err != nil {
		return nil, fmt.Errorf("read assets of task %s: %w", taskID, err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("read assets of task %s: %w", taskID, err)
	}
	return found, nil
}

// Owned returns those of ids that are assets of tenantID, in no order:
// another tenant's asset is left out exactly like a missing one.
func Owned(ctx context.Context, q pg.Querier, tenantID uuid.UUID, ids []uuid.UUID) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, `SELECT asset_id FROM assets WHERE tenant_id = $1 AND asset_id = ANY($2)`, tenantID, ids)
	if err != nil {
		return nil, fmt.Errorf("read assets of tenant %s: %w", tenantID, err)
	}
	owned, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return nil, fmt.Errorf("read assets of tenant %s: %w", tenantID, err)
	}
	return owned, nil
}
