package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
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
	todo, err := asset.LackingDerivatives(ctx, s.p.Pool, asset.LackingParams{
		Finished: []string{string(task.Succeeded), string(task.CanceledWithOut)},
		Now:      now, StuckAfter: s.p.Journey.StuckAfter, MaxFailures: s.cfg.MaxTries, Limit: s.cfg.Batch,
	})
	if err != nil {
		return 0, err
	}
	for _, m := range todo {
		err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error {
			t, err := task.Get(ctx, tx, m.TaskID)
			if err != nil {
				return err
			}
			step := catalog.DerivativeStep(string(m.Kind))
			e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: m.SourceID, Step: step})
			if err != nil {
				return err
			}
			ctx, span, err := task.ContinueTrace(ctx, tx, t.ID, "reconcile missing "+string(m.Kind))
			defer span.End()
			if err != nil {
				return err
			}
			if err := outbox.Write(ctx, tx, e); err != nil {
				return err
			}
			if err := record(ctx, tx, repair{Kind: RepairDerivativeRetry, AggregateType: task.AggregateType, AggregateID: t.ID.String(),
				Reason: fmt.Sprintf("the finished task lacks its optional %s; asked again", m.Kind)}); err != nil {
				return err
			}
			// The task stays finished; its clock only paces the retries.
			return task.Pace(ctx, tx, t.ID)
		})
		if err != nil {
			return 0, fmt.Errorf("retry missing %s of task %s: %w", m.Kind, m.TaskID, err)
		}
	}
	return len(todo), nil
}
