package task

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/idempotency"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/telemetry"
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
// nothing; a different request hash is [ErrIdempotencyConflict]. The
// task keeps ctx's span (see [ContinueTrace]).
func Create(ctx context.Context, tx pgx.Tx, o Origin, n New) (t Task, created bool, err error) {
	inputs := n.InputAssetIDs
	if inputs == nil {
		inputs = []uuid.UUID{}
	}
	t, created, err = idempotency.Create(ctx, tx, byIdempotencyKey, idempotency.Key{TenantID: n.TenantID, Key: n.IdempotencyKey, RequestHash: n.RequestHash},
		`INSERT INTO generation_tasks
		(tenant_id, client_idempotency_key, request_hash, model, prompt, duration_seconds, resolution, input_asset_ids, priority, trace_parent)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULLIF($10, ''))
		ON CONFLICT (tenant_id, client_idempotency_key) DO NOTHING
		RETURNING `+selectColumns,
		n.TenantID, n.IdempotencyKey, n.RequestHash, n.Model, n.Prompt, n.DurationSeconds, n.Resolution, inputs, n.Priority, traceParentOf(ctx))
	if err != nil || !created {
		return t, false, err
	}
	if err := record(ctx, tx, o, "", t, "created", nil); err != nil {
		return Task{}, false, err
	}
	return t, true, nil
}

// byIdempotencyKey is how [Create] finds the task a key already names.
var byIdempotencyKey = idempotency.Table[Task]{
	Name:        "task",
	Existing:    `SELECT ` + selectColumns + ` FROM generation_tasks WHERE tenant_id = $1 AND client_idempotency_key = $2`,
	Scan:        scan,
	NotFound:    ErrNotFound,
	RequestHash: func(t Task) []byte { return t.RequestHash },
	Conflict:    ErrIdempotencyConflict,
}

// traceParentOf is ctx's span as a W3C traceparent, "" without one.
func traceParentOf(ctx context.Context) string {
	tp, _ := telemetry.TraceParent(ctx)
	return tp
}

// ContinueTrace starts a span named name in the trace of the request that
// created task id, linked to ctx's own span, for work that arrives without
// the task's trace (a provider callback, a reconciler re-drive): the events
// that work writes then belong to the task's trace. Without a stored trace
// the span is a child of ctx's. End the span when the work is done.
func ContinueTrace(ctx context.Context, db pg.DB, id uuid.UUID, name string) (context.Context, trace.Span, error) {
	var tp string
	if err := db.QueryRow(ctx, `SELECT coalesce(trace_parent, '') FROM generation_tasks WHERE task_id = $1`, id).Scan(&tp); err != nil {
		return ctx, trace.SpanFromContext(context.Background()), fmt.Errorf("read trace of task %s: %w", id, err)
	}
	ctx, span := telemetry.StartContinued(ctx, tp, name, attribute.String("aivedio.task_id", id.String()))
	return ctx, span, nil
}
