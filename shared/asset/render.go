package asset

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// NewRender is a render's output stored in object storage under a key
// its content decides, to be recorded.
type NewRender struct {
	TenantID  uuid.UUID
	ObjectKey string
	SHA256    []byte
	SizeBytes int64
}

// RecordRender records a render's output, an MP4, READY, and returns its
// id with inserted true. An asset already
// stored under the key (a render of the same content committed it first)
// is not touched, and inserted is false: [StoredAt] finds it.
func RecordRender(ctx context.Context, q pg.Querier, n NewRender) (id uuid.UUID, inserted bool, err error) {
	err = q.QueryRow(ctx, `INSERT INTO assets (tenant_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, $3, $4, $5, 'video/mp4') ON CONFLICT (object_key) DO NOTHING RETURNING asset_id`,
		n.TenantID, KindRender, n.ObjectKey, n.SHA256, n.SizeBytes).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("record render output: %w", err)
	}
	return id, true, nil
}

// StoredAt finds the asset stored under objectKey, of any kind and
// status; found is false when there is none.
func StoredAt(ctx context.Context, q pg.Querier, objectKey string) (id uuid.UUID, found bool, err error) {
	err = q.QueryRow(ctx, `SELECT asset_id FROM assets WHERE object_key = $1`, objectKey).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("look for the asset stored under %s: %w", objectKey, err)
	}
	return id, true, nil
}

// ReadyRender finds tenantID's READY render output stored under
// objectKey, the one a render of the same content can reuse; found is
// false when there is none.
func ReadyRender(ctx context.Context, q pg.Querier, tenantID uuid.UUID, objectKey string) (id uuid.UUID, found bool, err error) {
	err = q.QueryRow(ctx, `SELECT asset_id FROM assets WHERE object_key = $1 AND kind = $2 AND tenant_id = $3 AND status = $4`,
		objectKey, KindRender, tenantID, Ready).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("look for stored render output: %w", err)
	}
	return id, true, nil
}
