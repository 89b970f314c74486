// Package asset owns the assets table: every media object the system
// knows, whose bytes live in object storage (seed 7.3). Uploads a tenant
// makes through the Asset API, provider outputs the fetch stage stores,
// the derivatives made from them, and final renders are all assets.
//
// An upload is created PENDING_UPLOAD with the size and sha256 its client
// promised; [Complete] checks the stored object against them and moves it
// to PROCESSING; the probe stage makes it READY or FAILED with a reason. An
// output the pipeline stores itself starts PROCESSING (until probed), a
// derivative READY.
package asset

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// Status is assets.status.
type Status string

// The statuses (the table's CHECK constraint).
const (
	PendingUpload Status = "PENDING_UPLOAD"
	Processing    Status = "PROCESSING"
	Ready         Status = "READY"
	Failed        Status = "FAILED"
)

// MediaType is what an upload declares itself to be.
type MediaType string

// The media types of uploads.
const (
	Video MediaType = "VIDEO"
	Audio MediaType = "AUDIO"
	Image MediaType = "IMAGE"
)

// Kind is assets.kind: what role the object plays. Uploads and provider
// outputs are originals (SOURCE).
type Kind string

// The kinds (the table's CHECK constraint).
const (
	KindSource    Kind = "SOURCE"
	KindProxy     Kind = "PROXY"
	KindThumbnail Kind = "THUMBNAIL"
	KindWaveform  Kind = "WAVEFORM"
	KindRender    Kind = "RENDER"
)

// Errors callers branch on.
var (
	ErrNotFound = errors.New("asset not found")
	// ErrIdempotencyConflict: the tenant already used the idempotency key
	// for a different upload.
	ErrIdempotencyConflict = errors.New("idempotency key already used with a different upload")
	// ErrStale: the asset is no longer in the status the change expects.
	ErrStale = errors.New("asset changed concurrently")
)

// Asset is one assets row.
type Asset struct {
	ID            uuid.UUID
	TenantID      uuid.UUID
	TaskID        *uuid.UUID // the generation task it came from; nil for uploads and renders
	SourceAssetID *uuid.UUID // what a derivative was made from
	Kind          Kind
	Status        Status
	MediaType     MediaType // uploads only
	Filename      string    // uploads only
	ObjectKey     string
	SHA256        []byte
	SizeBytes     int64
	ContentType   string
	DurationMS    *int64
	Width         *int
	Height        *int
	VideoCodec    string
	AudioCodec    string
	HasAudio      bool // the probe found an audio stream (audio_codec is set)
	Probed        bool
	ErrorCode     string
	ErrorMessage  string
	Rescues       int    // the reconciler's re-emissions of an upload's probe that reached the probe stage
	RequestHash   []byte // of an upload's announcement, to tell a retry under its idempotency key from a reuse; nil for others
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// Review is the status of the content review of the generation the
	// asset comes from while that review has not approved it (PENDING,
	// WAITING, UNAVAILABLE, REJECTED); "" when no review is required, or
	// it approved. See [Asset.Usable].
	Review string
}

// Usable reports whether the asset may be handed out (a download URL), cut
// into a timeline or rendered: it is READY, and no content review holds
// it back. An output is not usable until its review approved it: not while
// the review is pending, waiting for the reviewer or unavailable, and never
// once it rejected it.
func (a Asset) Usable() bool { return a.Status == Ready && a.Review == "" }

// Unusable says, for a person, why the asset is not [Asset.Usable]; ""
// when it is.
func (a Asset) Unusable() string {
	switch {
	case a.Status != Ready:
		return fmt.Sprintf("asset %s is %s, not READY", a.ID, a.Status)
	case a.Review != "":
		return fmt.Sprintf("asset %s is held by the content review of its generation (review %s): it can be used once the review approves it", a.ID, a.Review)
	}
	return ""
}

const columns = `asset_id, tenant_id, task_id, source_asset_id, kind, status, coalesce(media_type, ''), coalesce(filename, ''),
	object_key, checksum_sha256, size_bytes, content_type, duration_ms, width, height, coalesce(video_codec, ''), coalesce(audio_codec, ''),
	audio_codec IS NOT NULL, probe IS NOT NULL, coalesce(error_code, ''), coalesce(error_message, ''), rescues, request_hash, created_at, updated_at,
	coalesce((SELECT r.status FROM task_reviews r WHERE r.task_id = assets.task_id AND r.status <> 'APPROVED'), '')`

func scan(row pgx.Row) (Asset, error) {
	var a Asset
	err := row.Scan(&a.ID, &a.TenantID, &a.TaskID, &a.SourceAssetID, &a.Kind, &a.Status, &a.MediaType, &a.Filename,
		&a.ObjectKey, &a.SHA256, &a.SizeBytes, &a.ContentType, &a.DurationMS, &a.Width, &a.Height, &a.VideoCodec, &a.AudioCodec,
		&a.HasAudio, &a.Probed, &a.ErrorCode, &a.ErrorMessage, &a.Rescues, &a.RequestHash, &a.CreatedAt, &a.UpdatedAt, &a.Review)
	if errors.Is(err, pgx.ErrNoRows) {
		return Asset{}, ErrNotFound
	}
	if err != nil {
		return Asset{}, fmt.Errorf("read asset: %w", err)
	}
	a.CreatedAt, a.UpdatedAt = a.CreatedAt.UTC(), a.UpdatedAt.UTC()
	return a, nil
}

// Get reads one asset.
func Get(ctx context.Context, q pg.Querier, id uuid.UUID) (Asset, error) {
	a, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM assets WHERE asset_id = $1`, id))
	if err != nil {
		return Asset{}, fmt.Errorf("asset %s: %w", id, err)
	}
	return a, nil
}

// OfTenant reads one asset of tenantID: another tenant's reads exactly
// like a missing one.
func OfTenant(ctx context.Context, q pg.Querier, tenantID, id uuid.UUID) (Asset, error) {
	a, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM assets WHERE asset_id = $1 AND tenant_id = $2`, id, tenantID))
	if err != nil {
		return Asset{}, fmt.Errorf("asset %s: %w", id, err)
	}
	return a, nil
}

// Lock reads one asset FOR UPDATE in tx.
func Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Asset, error) {
	a, err := scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM assets WHERE asset_id = $1 FOR UPDATE`, id))
	if err != nil {
		return Asset{}, fmt.Errorf("lock asset %s: %w", id, err)
	}
	return a, nil
}

// Derivatives lists the assets made from source, oldest first.
func Derivatives(ctx context.Context, q pg.Querier, source uuid.UUID) ([]Asset, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM assets WHERE source_asset_id = $1 ORDER BY created_at, asset_id`, source)
	if err != nil {
		return nil, fmt.Errorf("list derivatives of %s: %w", source, err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) { return scan(r) })
}

// move changes an asset's status from one of from, with the error columns
// set for FAILED; another status is [ErrStale].
func move(ctx context.Context, q pg.Querier, id uuid.UUID, to Status, code, message string, from ...Status) error {
	var errCode, errMessage *string
	if to == Failed {
		errCode, errMessage = &code, &message
	}
	tag, err := q.Exec(ctx, `UPDATE assets SET status = $2, error_code = $3, error_message = $4, updated_at = now()
		WHERE asset_id = $1 AND status = ANY($5)`, id, to, errCode, errMessage, from)
	if err != nil {
		return fmt.Errorf("move asset %s to %s: %w", id, to, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: asset %s is not %v", ErrStale, id, from)
	}
	return nil
}

// Fail ends an asset that is not READY yet as FAILED with code and a
// message a person can act on.
func Fail(ctx context.Context, q pg.Querier, id uuid.UUID, code, message string) error {
	return move(ctx, q, id, Failed, code, message, PendingUpload, Processing)
}

// Withhold ends every READY asset of task id (its output and the
// derivatives made so far) as FAILED with code and message, so that no
// API hands out a download of them: the content review rejected the
// output. The objects stay stored, for a person to look at.
func Withhold(ctx context.Context, q pg.Querier, taskID uuid.UUID, code, message string) error {
	_, err := q.Exec(ctx, `UPDATE assets SET status = 'FAILED', error_code = $2, error_message = $3, updated_at = now()
		WHERE task_id = $1 AND status = 'READY'`, taskID, code, message)
	if err != nil {
		return fmt.Errorf("withhold the assets of task %s: %w", taskID, err)
	}
	return nil
}

// MarkReady ends a PROCESSING asset as READY.
func MarkReady(ctx context.Context, q pg.Querier, id uuid.UUID) error {
	return move(ctx, q, id, Ready, "", "", Processing)
}

// NewDerivative is a derivative stored in object storage, to be recorded.
type NewDerivative struct {
	TenantID    uuid.UUID
	TaskID      *uuid.UUID // the task whose output it derives from; nil for an upload's
	SourceID    uuid.UUID
	Kind        Kind // KindProxy, KindThumbnail or KindWaveform
	ObjectKey   string
	SHA256      []byte
	SizeBytes   int64
	ContentType string
}

// AddDerivative records a derivative READY. One of each kind exists per
// source: a second is not added, and added is false.
func AddDerivative(ctx context.Context, q pg.Querier, n NewDerivative) (added bool, err error) {
	tag, err := q.Exec(ctx, `INSERT INTO assets (asset_id, tenant_id, task_id, source_asset_id, kind, status, object_key, checksum_sha256,
			size_bytes, content_type)
		VALUES ($1, $2, $3, $4, $5, 'READY', $6, $7, $8, $9) ON CONFLICT (source_asset_id, kind) DO NOTHING`,
		uuid.Must(uuid.NewV7()), n.TenantID, n.TaskID, n.SourceID, n.Kind, n.ObjectKey, n.SHA256, n.SizeBytes, n.ContentType)
	if err != nil {
		return false, fmt.Errorf("record %s of asset %s: %w", n.Kind, n.SourceID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// DerivativesOf lists the derivatives of each of sources, oldest first.
func DerivativesOf(ctx context.Context, q pg.Querier, sources []uuid.UUID) (map[uuid.UUID][]Asset, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM assets WHERE source_asset_id = ANY($1) ORDER BY created_at, asset_id`, sources)
	if err != nil {
		return nil, fmt.Errorf("list derivatives: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) { return scan(r) })
	if err != nil {
		return nil, err
	}
	out := make(map[uuid.UUID][]Asset, len(sources))
	for _, a := range all {
		out[*a.SourceAssetID] = append(out[*a.SourceAssetID], a)
	}
	return out, nil
}
