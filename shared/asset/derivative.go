package asset

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// HasDerivative reports whether a derivative of kind was made from source.
func HasDerivative(ctx context.Context, q pg.Querier, source uuid.UUID, kind Kind) (bool, error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE source_asset_id = $1 AND kind = $2)`, source, kind).Scan(&exists); err != nil {
		return false, fmt.Errorf("look for the %s of asset %s: %w", kind, source, err)
	}
	return exists, nil
}

// DerivativeKinds lists the kinds of the derivatives made from source.
func DerivativeKinds(ctx context.Context, q pg.Querier, source uuid.UUID) ([]Kind, error) {
	rows, err := q.Query(ctx, `SELECT kind FROM assets WHERE source_asset_id = $1`, source)
	if err != nil {
		return nil, fmt.Errorf("list derivatives of %s: %w", source, err)
	}
	kinds, err := pgx.CollectRows(rows, pgx.RowTo[Kind])
	if err != nil {
		return nil, fmt.Errorf("list derivatives of %s: %w", source, err)
	}
	return kinds, nil
}

// Lacking is a derivative a finished task went without: the task, its
// output the derivative is made from, and the derivative's kind.
type Lacking struct {
	TaskID   uuid.UUID
	SourceID uuid.UUID
	Kind     Kind
}

// LackingParams say which derivatives [LackingDerivatives] lists.
type LackingParams struct {
	// Finished are the task statuses of a task that finished with its
	// output (the task package's).
	Finished []string
	// Now less StuckAfter (in whole milliseconds) is the last change a
	// listed task may have had: its clock paces the retries.
	Now        time.Time
	StuckAfter time.Duration
	// MaxFailures: a derivative that failed that often is not listed.
	MaxFailures int
	Limit       int
}

// LackingDerivatives lists at most p.Limit derivatives that finished tasks
// list in their missing_derivatives, least recently changed task first,
// with the task's output and not failed p.MaxFailures times yet
// (derivative_failures): the ones to ask for again.
func LackingDerivatives(ctx context.Context, q pg.Querier, p LackingParams) ([]Lacking, error) {
	rows, err := q.Query(ctx, `SELECT t.task_id, a.asset_id, m.kind FROM generation_tasks t
		CROSS JOIN LATERAL unnest(t.missing_derivatives) AS m(kind)
		JOIN assets a ON a.task_id = t.task_id AND a.kind = 'SOURCE'
		LEFT JOIN derivative_failures f ON f.source_asset_id = a.asset_id AND f.kind = m.kind
		WHERE t.status = ANY($5) AND coalesce(f.failures, 0) < $3
		AND t.updated_at < $1::timestamptz - interval '1 millisecond' * $2
		ORDER BY t.updated_at LIMIT $4`, p.Now, p.StuckAfter.Milliseconds(), p.MaxFailures, p.Limit, p.Finished)
	if err != nil {
		return nil, fmt.Errorf("scan missing derivatives: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Lacking, error) {
		var l Lacking
		err := row.Scan(&l.TaskID, &l.SourceID, &l.Kind)
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("scan missing derivatives: %w", err)
	}
	return out, nil
}
