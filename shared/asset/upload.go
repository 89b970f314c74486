package asset

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/idempotency"
	"github.com/aivedio/pipeline/shared/pg"
)

// NewUpload is an upload a tenant announces before sending its bytes.
type NewUpload struct {
	ID             uuid.UUID // chosen by the caller, so that the object key can name it
	TenantID       uuid.UUID
	IdempotencyKey string
	RequestHash    []byte // of the announcement, to tell a retry from a reuse of the key
	MediaType      MediaType
	ContentType    string
	SizeBytes      int64
	SHA256         []byte
	Filename       string
	ObjectKey      string
}

// CreateUpload records an upload PENDING_UPLOAD. When the tenant already
// announced one under the same idempotency key it returns that one with
// created false; a different announcement is [ErrIdempotencyConflict].
func CreateUpload(ctx context.Context, tx pgx.Tx, n NewUpload) (a Asset, created bool, err error) {
	return idempotency.Create(ctx, tx, uploadByIdempotencyKey, idempotency.Key{TenantID: n.TenantID, Key: n.IdempotencyKey, RequestHash: n.RequestHash},
		`INSERT INTO assets (asset_id, tenant_id, kind, status, media_type, filename, client_idempotency_key,
			request_hash, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (tenant_id, client_idempotency_key) WHERE client_idempotency_key IS NOT NULL DO NOTHING
		RETURNING `+columns,
		n.ID, n.TenantID, KindSource, PendingUpload, n.MediaType, n.Filename, n.IdempotencyKey, n.RequestHash, n.ObjectKey, n.SHA256, n.SizeBytes, n.ContentType)
}

// uploadByIdempotencyKey is how [CreateUpload] finds the upload a key
// already names.
var uploadByIdempotencyKey = idempotency.Table[Asset]{
	Name:        "upload",
	Existing:    `SELECT ` + columns + ` FROM assets WHERE tenant_id = $1 AND client_idempotency_key = $2`,
	Scan:        scan,
	NotFound:    ErrNotFound,
	RequestHash: func(a Asset) []byte { return a.RequestHash },
	Conflict:    ErrIdempotencyConflict,
}

// MarkUploaded moves an upload whose stored object was checked from
// PENDING_UPLOAD to PROCESSING, its bytes now under objectKey: a copy of
// the checked object that its upload URL cannot change.
func MarkUploaded(ctx context.Context, q pg.Querier, id uuid.UUID, objectKey string) error {
	tag, err := q.Exec(ctx, `UPDATE assets SET status = $2, object_key = $3, updated_at = now() WHERE asset_id = $1 AND status = $4`,
		id, Processing, objectKey, PendingUpload)
	if err != nil {
		return fmt.Errorf("move asset %s to %s: %w", id, Processing, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: asset %s is not %s", ErrStale, id, PendingUpload)
	}
	return nil
}

// Page is one page of a tenant's assets, newest first, and the cursor of
// the next ("" at the end).
type Page struct {
	Assets []Asset
	Next   string
}

// ErrBadCursor: a cursor this package did not write.
var ErrBadCursor = errors.New("cursor is not one a listing returned")

// List returns a page of at most limit originals of tenantID (uploads,
// outputs, renders: what no other asset was made from), newest first,
// after cursor ("" for the first page). The cursor is the last row's
// (created_at, asset_id), so rows added meanwhile neither repeat nor
// shift a page.
func List(ctx context.Context, q pg.Querier, tenantID uuid.UUID, cursor string, limit int) (Page, error) {
	after, id, err := decodeCursor(cursor)
	if err != nil {
		return Page{}, err
	}
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM assets
		WHERE tenant_id = $1 AND source_asset_id IS NULL AND ($2::timestamptz IS NULL OR (created_at, asset_id) < ($2, $3))
		ORDER BY created_at DESC, asset_id DESC LIMIT $4`, tenantID, after, id, limit+1)
	if err != nil {
		return Page{}, fmt.Errorf("list assets: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) { return scan(r) })
	if err != nil {
		return Page{}, err
	}
	p := Page{Assets: found}
	if len(found) > limit {
		p.Assets = found[:limit]
		last := p.Assets[limit-1]
		p.Next = encodeCursor(last.CreatedAt, last.ID)
	}
	return p, nil
}

// encodeCursor packs a row's position: microseconds since the epoch (the
// database's precision) and the asset id.
func encodeCursor(at time.Time, id uuid.UUID) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(at.UnixMicro()))
	b = append(b, id[:]...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (*time.Time, uuid.UUID, error) {
	if s == "" {
		return nil, uuid.Nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 8+16 {
		return nil, uuid.Nil, ErrBadCursor
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8]))).UTC()
	id, err := uuid.FromBytes(b[8:])
	if err != nil {
		return nil, uuid.Nil, ErrBadCursor
	}
	return &at, id, nil
}
