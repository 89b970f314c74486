package render

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// ChunkStatus is render_chunks.status.
type ChunkStatus string

// The statuses of a chunk.
const (
	ChunkPending   ChunkStatus = "PENDING"
	ChunkRendering ChunkStatus = "RENDERING" // claimed by one delivery until its lease ends
	ChunkDone      ChunkStatus = "DONE"
)

// Chunk is one render_chunks row: a window of the output of (TenantID,
// RenderKey).
type Chunk struct {
	TenantID     uuid.UUID
	RenderKey    string
	Window       Window
	Status       ChunkStatus
	LeaseUntil   *time.Time
	Attempts     int
	ObjectKey    string
	SizeBytes    int64
	SHA256       []byte
	ErrorMessage string
	UpdatedAt    time.Time
}

// DurationUS is the chunk's share of the output.
func (c Chunk) DurationUS() int64 { return c.Window.ToUS - c.Window.FromUS }

const chunkColumns = `tenant_id, render_key, chunk_index, chunk_key, from_us, to_us, status, lease_until, attempts,
	coalesce(object_key, ''), coalesce(size_bytes, 0), checksum_sha256, coalesce(error_message, ''), updated_at`

func scanChunk(row pgx.Row) (Chunk, error) {
	var c Chunk
	err := row.Scan(&c.TenantID, &c.RenderKey, &c.Window.Index, &c.Window.Key, &c.Window.FromUS, &c.Window.ToUS, &c.Status,
		&c.LeaseUntil, &c.Attempts, &c.ObjectKey, &c.SizeBytes, &c.SHA256, &c.ErrorMessage, &c.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Chunk{}, ErrNotFound
	}
	if err != nil {
		return Chunk{}, fmt.Errorf("read render chunk: %w", err)
	}
	c.LeaseUntil, c.UpdatedAt = pg.UTC(c.LeaseUntil), c.UpdatedAt.UTC()
	return c, nil
}

// ErrOtherPlanRendering: a chunk of the content planned with another
// chunk length is being rendered; the plan is recorded once it is over.
var ErrOtherPlanRendering = errors.New("a chunk of another plan of this content is rendering")

// AddChunks records the plan of the output (tenantID, key) for a render
// that starts: windows already recorded (by an earlier render of the same
// content, or an earlier delivery) are kept as they are, and start their
// attempts again (an earlier render's failures are not this one's); rows
// of another plan (another chunk length) are dropped, and their stored
// objects returned for the caller to remove.
func AddChunks(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string, windows []Window) (dropped []string, err error) {
	keys := make([]string, len(windows))
	for i, w := range windows {
		keys[i] = w.Key
	}
	var rendering bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM render_chunks WHERE tenant_id = $1 AND render_key = $2
		AND chunk_key <> ALL($3) AND status = 'RENDERING')`, tenantID, key, keys).Scan(&rendering); err != nil {
		return nil, fmt.Errorf("look for chunks of another plan: %w", err)
	}
	if rendering {
		return nil, ErrOtherPlanRendering
	}
	rows, err := q.Query(ctx, `DELETE FROM render_chunks WHERE tenant_id = $1 AND render_key = $2 AND chunk_key <> ALL($3)
		RETURNING coalesce(object_key, '')`, tenantID, key, keys)
	if err != nil {
		return nil, fmt.Errorf("drop chunks of another plan: %w", err)
	}
	objects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("drop chunks of another plan: %w", err)
	}
	for _, o := range objects {
		if o != "" {
			dropped = append(dropped, o)
		}
	}
	if _, err := q.Exec(ctx, `UPDATE render_chunks SET attempts = 0, error_message = NULL
		WHERE tenant_id = $1 AND render_key = $2 AND status = 'PENDING'`, tenantID, key); err != nil {
		return nil, fmt.Errorf("restart chunk attempts: %w", err)
	}
	return dropped, addChunks(ctx, q, tenantID, key, windows)
}

func addChunks(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string, windows []Window) error {
	idx, keys, from, to := make([]int, len(windows)), make([]string, len(windows)), make([]int64, len(windows)), make([]int64, len(windows))
	for i, w := range windows {
		idx[i], keys[i], from[i], to[i] = w.Index, w.Key, w.FromUS, w.ToUS
	}
	_, err := q.Exec(ctx, `INSERT INTO render_chunks (tenant_id, render_key, chunk_index, chunk_key, from_us, to_us)
		SELECT $1, $2, i, k, f, t FROM unnest($3::int[], $4::text[], $5::bigint[], $6::bigint[]) AS w (i, k, f, t)
		ON CONFLICT DO NOTHING`, tenantID, key, idx, keys, from, to)
	if err != nil {
		return fmt.Errorf("record render chunks: %w", err)
	}
	return nil
}

// Chunks lists the chunks of the output (tenantID, key) in order.
func Chunks(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string) ([]Chunk, error) {
	rows, err := q.Query(ctx, `SELECT `+chunkColumns+` FROM render_chunks WHERE tenant_id = $1 AND render_key = $2
		ORDER BY chunk_index`, tenantID, key)
	if err != nil {
		return nil, fmt.Errorf("list render chunks: %w", err)
	}
	chunks, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Chunk, error) { return scanChunk(r) })
	if err != nil {
		return nil, fmt.Errorf("list render chunks: %w", err)
	}
	return chunks, nil
}

// GetChunk reads one chunk of the output (tenantID, key).
func GetChunk(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string, index int) (Chunk, error) {
	c, err := scanChunk(q.QueryRow(ctx, `SELECT `+chunkColumns+` FROM render_chunks
		WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = $3`, tenantID, key, index))
	if err != nil {
		return Chunk{}, fmt.Errorf("render chunk %d: %w", index, err)
	}
	return c, nil
}

// Lease is one delivery's claim on a chunk: it alone renders the chunk
// until the claim ends, and only it may store the result.
type Lease struct {
	TenantID uuid.UUID
	Key      string
	Index    int
	Token    uuid.UUID
	Attempt  int // the how-manieth counted claim of the chunk this is
	// Counted says the claim counted toward Attempt: a claim of a PENDING
	// chunk does; one taken over from a holder that died does not (a
	// killed process or a lost database says nothing about the chunk).
	Counted bool
}

// Claim takes the chunk for one delivery for lease: a chunk that is
// pending, or whose previous claim ran out (its holder died), is claimed;
// one stored, or held by another live delivery, is not (ok false). Only a
// claim of a pending chunk counts as an attempt (see [Lease.Counted]).
func Claim(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string, index int, lease time.Duration) (l Lease, ok bool, err error) {
	l = Lease{TenantID: tenantID, Key: key, Index: index, Token: uuid.New()}
	err = q.QueryRow(ctx, `UPDATE render_chunks c SET status = 'RENDERING', lease_token = $4, lease_until = now() + $5::interval,
			attempts = c.attempts + CASE WHEN c.status = 'PENDING' THEN 1 ELSE 0 END, updated_at = now()
		FROM render_chunks was
		WHERE c.tenant_id = $1 AND c.render_key = $2 AND c.chunk_index = $3
			AND was.tenant_id = c.tenant_id AND was.render_key = c.render_key AND was.chunk_index = c.chunk_index
			AND (c.status = 'PENDING' OR (c.status = 'RENDERING' AND c.lease_until < now()))
		RETURNING c.attempts, was.status = 'PENDING'`, tenantID, key, index, l.Token, lease).Scan(&l.Attempt, &l.Counted)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("claim render chunk %d: %w", index, err)
	}
	return l, true, nil
}

// Extend keeps l's claim for another lease from now; false: the claim was
// lost (it ran out and another delivery took the chunk).
func (l Lease) Extend(ctx context.Context, q pg.Querier, lease time.Duration) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE render_chunks SET lease_until = now() + $5::interval
		WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = $3 AND lease_token = $4 AND status = 'RENDERING'`,
		l.TenantID, l.Key, l.Index, l.Token, lease)
	if err != nil {
		return false, fmt.Errorf("extend claim on render chunk %d: %w", l.Index, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Stored is a rendered chunk's object.
type Stored struct {
	ObjectKey string
	SizeBytes int64
	SHA256    []byte
}

// Store records the chunk l rendered as done; false: l's claim was lost
// and the result is not the chunk's.
func (l Lease) Store(ctx context.Context, q pg.Querier, s Stored) (bool, error) {
	tag, err := q.Exec(ctx, `UPDATE render_chunks SET status = 'DONE', lease_token = NULL, lease_until = NULL,
			object_key = $5, size_bytes = $6, checksum_sha256 = $7, error_message = NULL, updated_at = now()
		WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = $3 AND lease_token = $4 AND status = 'RENDERING'`,
		l.TenantID, l.Key, l.Index, l.Token, s.ObjectKey, s.SizeBytes, s.SHA256)
	if err != nil {
		return false, fmt.Errorf("record render chunk %d: %w", l.Index, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Give gives up l's claim so that the next delivery claims the chunk at
// once. A reason records a failed attempt (counted, also on a claim taken
// over from a dead holder); without one (the render ended, the result
// could not be recorded, an outage of storage or the database) the claim
// does not count as one.
func (l Lease) Give(ctx context.Context, q pg.Querier, reason string) error {
	_, err := q.Exec(ctx, `UPDATE render_chunks SET status = 'PENDING', lease_token = NULL, lease_until = NULL,
			error_message = coalesce(nullif($5, ''), error_message),
			attempts = attempts + CASE WHEN $5 <> '' AND NOT $6::boolean THEN 1 WHEN $5 = '' AND $6::boolean AND attempts > 0 THEN -1 ELSE 0 END,
			updated_at = now()
		WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = $3 AND lease_token = $4 AND status = 'RENDERING'`,
		l.TenantID, l.Key, l.Index, l.Token, reason, l.Counted)
	if err != nil {
		return fmt.Errorf("give up render chunk %d: %w", l.Index, err)
	}
	return nil
}

// Forget removes the record of a stored chunk whose object is gone, so
// that it renders again.
func Forget(ctx context.Context, q pg.Querier, c Chunk) error {
	_, err := q.Exec(ctx, `UPDATE render_chunks SET status = 'PENDING', object_key = NULL, size_bytes = NULL, checksum_sha256 = NULL,
			updated_at = now()
		WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = $3 AND status = 'DONE'`, c.TenantID, c.RenderKey, c.Window.Index)
	if err != nil {
		return fmt.Errorf("forget render chunk %d: %w", c.Window.Index, err)
	}
	return nil
}

// Drop removes every chunk row of the output (tenantID, key) and returns
// the objects they stored, for the caller to remove once committed.
func Drop(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string) ([]string, error) {
	rows, err := q.Query(ctx, `DELETE FROM render_chunks WHERE tenant_id = $1 AND render_key = $2 RETURNING coalesce(object_key, '')`, tenantID, key)
	if err != nil {
		return nil, fmt.Errorf("drop render chunks: %w", err)
	}
	objects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("drop render chunks: %w", err)
	}
	var out []string
	for _, o := range objects {
		if o != "" {
			out = append(out, o)
		}
	}
	return out, nil
}

// DonePercent is how much of a render the stored chunks make, in percent.
func DonePercent(chunks []Chunk, durationUS int64) int {
	if durationUS <= 0 {
		return 0
	}
	var done int64
	for _, c := range chunks {
		if c.Status == ChunkDone {
			done += c.DurationUS()
		}
	}
	return min(100, int(done*100/durationUS))
}
