package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// DefaultMaxBackgroundTries bounds the background retries of one optional
// derivative, counted with its first failures: past it the task keeps its
// flag for good (an operator sees it in missing_derivatives).
const DefaultMaxBackgroundTries = 10

// DerivativeRetrierConfig configures the [DerivativeRetrier].
type DerivativeRetrierConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the derivatives one pass asks for; DefaultBatch.
	Batch int
	// MaxTries is DefaultMaxBackgroundTries when zero.
	MaxTries int
}

// DerivativeRetrier asks again, once per RECONCILE_STUCK_AFTER, for the
// optional derivatives (thumbnail, waveform) a finished task lacks.
type DerivativeRetrier struct {
	loop
	p   Params
	cfg DerivativeRetrierConfig
}

// NewDerivativeRetrier returns the retrier over p, configured by
// p.Maintenance.Derivatives.
func NewDerivativeRetrier(p Params) *DerivativeRetrier {
	p = defaults(p)
	cfg := p.Maintenance.Derivatives
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.MaxTries = cmp.Or(cfg.MaxTries, DefaultMaxBackgroundTries)
	return &DerivativeRetrier{loop: newLoop("derivative_retrier", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *DerivativeRetrier) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass at the clock's time and returns how many
// derivatives it asked for again.
func (s *DerivativeRetrier) RunOnce(ctx context.Context) (int, error) { return s.pass(ctx, clock(s.p)) }

func (s *DerivativeRetrier) pass(ctx context.Context, now time.Time) (int, error) {
	rows, err := s.p.Pool.Query(ctx, `SELECT t.task_id, a.asset_id, m.kind FROM generation_tasks t
		CROSS JOIN LATERAL unnest(t.missing_derivatives) AS m(kind)
		JOIN assets a ON a.task_id = t.task_id AND a.kind = 'SOURCE'
		LEFT JOIN derivative_failures f ON f.source_asset_id = a.asset_id AND f.kind = m.kind
		WHERE t.status IN ('SUCCEEDED', 'CANCELED_WITH_OUTPUT') AND coalesce(f.failures, 0) < $3
		AND t.updated_at < $1::timestamptz - interval '1 millisecond' * $2
		ORDER BY t.updated_at LIMIT $4`, now, s.p.Journey.StuckAfter.Milliseconds(), s.cfg.MaxTries, s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("scan missing derivatives: %w", err)
	}
	type missing struct {
		taskID, assetID uuid.UUID
		kind            string
	}
	todo, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (missing, error) {
		var m missing
		err := row.Scan(&m.taskID, &m.assetID, &m.kind)
		return m, err
	})
	if err != nil {
		return 0, err
	}
	for _, m := range todo {
		err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error {
			t, err := task.Get(ctx, tx, m.taskID)
			if err != nil {
				return err
			}
			step := catalog.DerivativeStep(m.kind)
			e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: m.assetID, Step: step})
			if err != nil {
				return err
			}
			ctx, span, err := task.ContinueTrace(ctx, tx, t.ID, "reconcile missing "+m.kind)
			defer span.End()
			if err != nil {
				return err
			}
			if err := outbox.Write(ctx, tx, e); err != nil {
				return err
			}
			if err := record(ctx, tx, repair{Kind: RepairDerivativeRetry, AggregateType: task.AggregateType, AggregateID: t.ID.String(),
				Reason: fmt.Sprintf("the finished task lacks its optional %s; asked again", m.kind)}); err != nil {
				return err
			}
			// The task stays finished; its clock only paces the retries.
			return task.Pace(ctx, tx, t.ID)
		})
		if err != nil {
			return 0, fmt.Errorf("retry missing %s of task %s: %w", m.kind, m.taskID, err)
		}
	}
	return len(todo), nil
}
