package asset

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// ExpireUploads ends as FAILED (upload.expired) at most limit uploads
// still PENDING_UPLOAD since before, and returns them: their announced
// file never came.
func ExpireUploads(ctx context.Context, q pg.Querier, before time.Time, limit int, message string) ([]Asset, error) {
	rows, err := q.Query(ctx, `UPDATE assets SET status = 'FAILED', error_code = 'upload.expired', error_message = $3, updated_at = now()
		WHERE asset_id IN (SELECT asset_id FROM assets WHERE status = 'PENDING_UPLOAD' AND updated_at < $1
			ORDER BY updated_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		RETURNING `+columns, before, limit, message)
	if err != nil {
		return nil, fmt.Errorf("expire uploads: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) { return scan(r) })
}

// StuckUploads lists at most limit uploads PROCESSING since before: their
// probe was lost or keeps failing.
func StuckUploads(ctx context.Context, q pg.Querier, before time.Time, limit int) ([]uuid.UUID, error) {
	rows, err := q.Query(ctx, `SELECT asset_id FROM assets WHERE status = 'PROCESSING' AND task_id IS NULL AND source_asset_id IS NULL
		AND kind = 'SOURCE' AND updated_at < $1 ORDER BY updated_at LIMIT $2`, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list stuck uploads: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// NoteRescue restarts an upload's clock for a re-emission of its probe,
// and counts the re-emission before it (rescues) when that one reached
// the probe stage (counted).
func NoteRescue(ctx context.Context, q pg.Querier, id uuid.UUID, counted bool) error {
	if _, err := q.Exec(ctx, `UPDATE assets SET rescues = rescues + CASE WHEN $2 THEN 1 ELSE 0 END, updated_at = now() WHERE asset_id = $1`, id, counted); err != nil {
		return fmt.Errorf("note rescue of asset %s: %w", id, err)
	}
	return nil
}
