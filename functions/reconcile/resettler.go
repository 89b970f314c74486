package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// ResettlerConfig configures the [Resettler].
type ResettlerConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the tasks one pass settles again; DefaultBatch.
	Batch int
}

// Resettler asks billing again for terminal tasks still holding their
// reservation: their settle event was lost. Settling is idempotent in
// billing, so a settle asked twice charges once.
type Resettler struct {
	loop
	p   Params
	cfg ResettlerConfig
}

// NewResettler returns the resettler over p, configured by
// p.Maintenance.Resettle.
func NewResettler(p Params) *Resettler {
	p = defaults(p)
	cfg := p.Maintenance.Resettle
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	return &Resettler{loop: newLoop("resettler", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *Resettler) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass at the clock's time and returns how many tasks it
// settled again.
func (s *Resettler) RunOnce(ctx context.Context) (int, error) { return s.pass(ctx, clock(s.p)) }

func (s *Resettler) pass(ctx context.Context, now time.Time) (int, error) {
	rows, err := s.p.Pool.Query(ctx, `SELECT t.task_id FROM generation_tasks t JOIN credit_reservations c USING (task_id)
		WHERE c.status = 'HELD' AND t.status IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'CANCELED_WITH_OUTPUT')
		AND t.updated_at < $1::timestamptz - interval '1 millisecond' * $2 ORDER BY t.updated_at LIMIT $3`,
		now, s.p.Journey.ScanGrace.Milliseconds(), s.cfg.Batch)
	if err != nil {
		return 0, fmt.Errorf("scan unsettled tasks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error {
			t, err := task.Get(ctx, tx, id)
			if err != nil {
				return err
			}
			e, err := scanOrigin.Emit(t, task.SettleRequested{TaskID: t.ID, Status: t.Status})
			if err != nil {
				return err
			}
			ctx, span, err := task.ContinueTrace(ctx, tx, t.ID, "reconcile settle")
			defer span.End()
			if err != nil {
				return err
			}
			if err := outbox.Write(ctx, tx, e); err != nil {
				return err
			}
			return record(ctx, tx, repair{Kind: RepairTaskResettle, AggregateType: task.AggregateType, AggregateID: t.ID.String(),
				Reason: fmt.Sprintf("the task is %s and still holds its reservation: its settle was lost", t.Status)})
		})
		if err != nil {
			return 0, fmt.Errorf("resettle task %s: %w", id, err)
		}
	}
	return len(ids), nil
}
