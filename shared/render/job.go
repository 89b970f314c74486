package render

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/idempotency"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Status is render_jobs.status.
type Status string

// The statuses of a render (the table's CHECK constraint).
const (
	Queued    Status = "QUEUED"
	Rendering Status = "RENDERING"
	Succeeded Status = "SUCCEEDED"
	Failed    Status = "FAILED"
	Canceled  Status = "CANCELED"
)

// Terminal reports whether a render in s is done for good.
func (s Status) Terminal() bool { return s == Succeeded || s == Failed || s == Canceled }

// Errors callers branch on.
var (
	ErrNotFound = errors.New("render not found")
	// ErrIdempotencyConflict: the tenant already used the idempotency key
	// for a different render request.
	ErrIdempotencyConflict = errors.New("idempotency key already used with a different render request")
	// ErrStale: the render moved since it was read.
	ErrStale = errors.New("render changed concurrently")
)

// Job is one render_jobs row.
type Job struct {
	ID              uuid.UUID
	TenantID        uuid.UUID
	RevisionID      uuid.UUID
	SpecID          string // sha256 (hex) of the revision's spec
	Profile         string
	Key             string // the output's content key ([Key])
	DurationUS      int64
	Priority        int
	Status          Status
	Version         int64
	Progress        int // percent, as of the last chunk stored
	OutputAssetID   *uuid.UUID
	Reused          bool // the output was stored by an earlier render of the same content
	ErrorCode       string
	ErrorMessage    string
	JoinRequestedAt *time.Time
	// Rescues counts the reconciler's re-asks since the last progress that
	// the render stage handled without progress; RescueAsks every re-ask
	// since then, delivered or not; RescuedAt and RescueEvents are the
	// last one's time and events.
	Rescues        int
	RescueAsks     int
	RescuedAt      *time.Time
	RescueEvents   []uuid.UUID
	IdempotencyKey string
	RequestHash    []byte
	CreatedAt      time.Time
	UpdatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
}

const jobColumns = `render_job_id, tenant_id, project_revision_id, render_spec_id, profile, render_key, duration_us, priority,
	status, version, progress, output_asset_id, reused, coalesce(error_code, ''), coalesce(error_message, ''), join_requested_at, rescues,
	client_idempotency_key, request_hash, created_at, updated_at, started_at, finished_at, rescue_asks, rescued_at, rescue_events`

func scanJob(row pgx.Row) (Job, error) {
	var j Job
	err := row.Scan(&j.ID, &j.TenantID, &j.RevisionID, &j.SpecID, &j.Profile, &j.Key, &j.DurationUS, &j.Priority,
		&j.Status, &j.Version, &j.Progress, &j.OutputAssetID, &j.Reused, &j.ErrorCode, &j.ErrorMessage, &j.JoinRequestedAt, &j.Rescues,
		&j.IdempotencyKey, &j.RequestHash, &j.CreatedAt, &j.UpdatedAt, &j.StartedAt, &j.FinishedAt, &j.RescueAsks, &j.RescuedAt, &j.RescueEvents)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, ErrNotFound
	}
	if err != nil {
		return Job{}, fmt.Errorf("read render: %w", err)
	}
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	j.StartedAt, j.FinishedAt, j.JoinRequestedAt = pg.UTC(j.StartedAt), pg.UTC(j.FinishedAt), pg.UTC(j.JoinRequestedAt)
	j.RescuedAt = pg.UTC(j.RescuedAt)
	return j, nil
}

// New is what creating a render needs.
type New struct {
	TenantID       uuid.UUID
	RevisionID     uuid.UUID
	SpecID         string
	Profile        string
	Key            string
	DurationUS     int64
	Priority       int
	IdempotencyKey string
	RequestHash    []byte
}

// Create inserts a QUEUED render through tx. When the tenant already has
// one under the same idempotency key, Create returns it with created
// false and writes nothing; a different request hash is
// [ErrIdempotencyConflict].
func Create(ctx context.Context, tx pgx.Tx, n New) (j Job, created bool, err error) {
	traceParent, _ := telemetry.TraceParent(ctx) // what a reconciler re-drive continues
	return idempotency.Create(ctx, tx, byIdempotencyKey, idempotency.Key{TenantID: n.TenantID, Key: n.IdempotencyKey, RequestHash: n.RequestHash},
		`INSERT INTO render_jobs
		(tenant_id, project_revision_id, render_spec_id, profile, render_key, duration_us, priority, client_idempotency_key, request_hash, trace_parent)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULLIF($10, ''))
		ON CONFLICT (tenant_id, client_idempotency_key) DO NOTHING
		RETURNING `+jobColumns,
		n.TenantID, n.RevisionID, n.SpecID, n.Profile, n.Key, n.DurationUS, n.Priority, n.IdempotencyKey, n.RequestHash, traceParent)
}

// byIdempotencyKey is how [Create] finds the render a key already names.
var byIdempotencyKey = idempotency.Table[Job]{
	Name:        "render",
	Existing:    `SELECT ` + jobColumns + ` FROM render_jobs WHERE tenant_id = $1 AND client_idempotency_key = $2`,
	Scan:        scanJob,
	NotFound:    ErrNotFound,
	RequestHash: func(j Job) []byte { return j.RequestHash },
	Conflict:    ErrIdempotencyConflict,
}

// Get reads one render.
func Get(ctx context.Context, q pg.Querier, id uuid.UUID) (Job, error) {
	j, err := scanJob(q.QueryRow(ctx, `SELECT `+jobColumns+` FROM render_jobs WHERE render_job_id = $1`, id))
	if err != nil {
		return Job{}, fmt.Errorf("render %s: %w", id, err)
	}
	return j, nil
}

// OfTenant reads one render of tenantID: another tenant's reads exactly
// like a missing one.
func OfTenant(ctx context.Context, q pg.Querier, tenantID, id uuid.UUID) (Job, error) {
	j, err := scanJob(q.QueryRow(ctx, `SELECT `+jobColumns+` FROM render_jobs WHERE render_job_id = $1 AND tenant_id = $2`, id, tenantID))
	if err != nil {
		return Job{}, fmt.Errorf("render %s: %w", id, err)
	}
	return j, nil
}

// Lock reads one render FOR UPDATE in tx.
func Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Job, error) {
	j, err := scanJob(tx.QueryRow(ctx, `SELECT `+jobColumns+` FROM render_jobs WHERE render_job_id = $1 FOR UPDATE`, id))
	if err != nil {
		return Job{}, fmt.Errorf("lock render %s: %w", id, err)
	}
	return j, nil
}

// Change is one versioned transition of a render.
type Change struct {
	To            Status
	Progress      *int
	OutputAssetID *uuid.UUID
	Reused        bool
	ErrorCode     string
	ErrorMessage  string
	// JoinRequested records that the join was asked for now.
	JoinRequested bool
	// Asked records a re-ask by the reconciler of these events, now.
	// Rescued counts the previous re-ask as handled without progress;
	// Progressed (a chunk stored) starts both counts again.
	Asked      []uuid.UUID
	Rescued    bool
	Progressed bool
}

// Move applies ch to cur in tx: UPDATE ... WHERE version = cur.Version,
// incrementing the version; 0 rows is [ErrStale], for the caller to
// re-read and decide. A change of status the table of legal moves does
// not have ([Legal]) is refused before touching the database, with an
// error that is [aggregate.ErrIllegalMove]. It returns the render as
// changed.
func Move(ctx context.Context, tx pgx.Tx, cur Job, ch Change) (Job, error) {
	to := ch.To
	if to == "" {
		to = cur.Status
	}
	if to != cur.Status && !Legal(cur.Status, to) {
		return Job{}, &aggregate.IllegalMoveError{Kind: Kind.Name, ID: cur.ID.String(), From: string(cur.Status), To: string(to)}
	}
	var errorCode, errorMessage *string
	if ch.ErrorCode != "" {
		errorCode, errorMessage = &ch.ErrorCode, &ch.ErrorMessage
	}
	j, err := scanJob(tx.QueryRow(ctx, `UPDATE render_jobs SET
			status = $3, version = version + 1, updated_at = now(),
			progress = coalesce($4, progress),
			output_asset_id = coalesce($5, output_asset_id),
			reused = reused OR $6,
			error_code = coalesce($7, error_code), error_message = coalesce($8, error_message),
			join_requested_at = CASE WHEN $9 THEN now() ELSE join_requested_at END,
			rescues = CASE WHEN $10 THEN rescues + 1 WHEN $11 THEN 0 ELSE rescues END,
			rescue_asks = CASE WHEN cardinality($12::uuid[]) > 0 THEN rescue_asks + 1 WHEN $11 THEN 0 ELSE rescue_asks END,
			rescued_at = CASE WHEN cardinality($12::uuid[]) > 0 THEN now() ELSE rescued_at END,
			rescue_events = CASE WHEN cardinality($12::uuid[]) > 0 THEN $12::uuid[] ELSE rescue_events END,
			started_at = CASE WHEN $3 = 'RENDERING' THEN coalesce(started_at, now()) ELSE started_at END,
			finished_at = CASE WHEN $3 IN ('SUCCEEDED', 'FAILED', 'CANCELED') THEN coalesce(finished_at, now()) ELSE finished_at END
		WHERE render_job_id = $1 AND version = $2
		RETURNING `+jobColumns,
		cur.ID, cur.Version, to, ch.Progress, ch.OutputAssetID, ch.Reused, errorCode, errorMessage, ch.JoinRequested, ch.Rescued, ch.Progressed, asked(ch.Asked)))
	if errors.Is(err, ErrNotFound) {
		return Job{}, fmt.Errorf("render %s at version %d: %w", cur.ID, cur.Version, ErrStale)
	}
	if err != nil {
		return Job{}, fmt.Errorf("move render %s to %s: %w", cur.ID, to, err)
	}
	return j, nil
}

// asked is never nil: a nil slice would be a NULL array, and cardinality
// of NULL is NULL.
func asked(ids []uuid.UUID) []uuid.UUID {
	if ids == nil {
		return []uuid.UUID{}
	}
	return ids
}

// Unfinished lists renders in status whose last change is older than
// before, oldest first, at most limit: the reconciler's look at renders
// that stopped moving.
func Unfinished(ctx context.Context, q pg.Querier, status Status, before time.Time, limit int) ([]Job, error) {
	rows, err := q.Query(ctx, `SELECT `+jobColumns+` FROM render_jobs WHERE status = $1 AND updated_at < $2
		ORDER BY updated_at LIMIT $3`, status, before, limit)
	if err != nil {
		return nil, fmt.Errorf("list %s renders: %w", status, err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
	if err != nil {
		return nil, fmt.Errorf("list %s renders: %w", status, err)
	}
	return jobs, nil
}

// Siblings lists the other running renders of j's content (same tenant
// and render key): they wait on the same chunks, and j's output is
// theirs once stored.
func Siblings(ctx context.Context, q pg.Querier, j Job) ([]Job, error) {
	rows, err := q.Query(ctx, `SELECT `+jobColumns+` FROM render_jobs
		WHERE tenant_id = $1 AND render_key = $2 AND status = 'RENDERING' AND render_job_id <> $3`, j.TenantID, j.Key, j.ID)
	if err != nil {
		return nil, fmt.Errorf("list renders of the same content: %w", err)
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Job, error) { return scanJob(r) })
	if err != nil {
		return nil, fmt.Errorf("list renders of the same content: %w", err)
	}
	return jobs, nil
}

// Touch records progress on every running render of (tenantID, key) but
// except: a chunk they all wait on was stored, so their rescue count
// starts again and the reconciler's stuck clock too.
func Touch(ctx context.Context, q pg.Querier, tenantID uuid.UUID, key string, except uuid.UUID) error {
	if _, err := q.Exec(ctx, `UPDATE render_jobs SET rescues = 0, rescue_asks = 0, updated_at = now()
		WHERE tenant_id = $1 AND render_key = $2 AND status = 'RENDERING' AND render_job_id <> $3`, tenantID, key, except); err != nil {
		return fmt.Errorf("touch renders of the same content: %w", err)
	}
	return nil
}

// ContinueTrace starts a span named name in the trace of the request that
// created render id, linked to ctx's span, for work that arrives without
// it (a reconciler re-ask): see telemetry.StartContinued. End the span
// when the work is done.
func ContinueTrace(ctx context.Context, db pg.DB, id uuid.UUID, name string) (context.Context, trace.Span, error) {
	var tp string
	if err := db.QueryRow(ctx, `SELECT coalesce(trace_parent, '') FROM render_jobs WHERE render_job_id = $1`, id).Scan(&tp); err != nil {
		return ctx, trace.SpanFromContext(context.Background()), fmt.Errorf("read trace of render %s: %w", id, err)
	}
	ctx, span := telemetry.StartContinued(ctx, tp, name, attribute.String("aivedio.render_id", id.String()))
	return ctx, span, nil
}
