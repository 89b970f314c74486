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
// billing, so a settle asked twice charges once. A task is asked at most
// once per RECONCILE_STUCK_AFTER.
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
	// A settle asked again does not touch its task, so what keeps the pass
	// from asking it every time is the ask itself: none while an event of
	// the task waits in the outbox (the ask, or the first settle, is on its
	// way), and none within RECONCILE_STUCK_AFTER of the last.
	rows, err := s.p.Pool.Query(ctx, `SELECT t.task_id FROM generation_tasks t JOIN credit_reservations c USING (task_id)
		WHERE c.status = 'HELD' AND t.status IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'CANCELED_WITH_OUTPUT')
		AND t.updated_at < $1::timestamptz - interval '1 millisecond' * $2
		AND NOT EXISTS (SELECT 1 FROM outbox_events o WHERE o.published_at IS NULL AND o.aggregate_id = t.task_id::text)
		AND NOT EXISTS (SELECT 1 FROM reconcile_repairs r WHERE r.aggregate_type = $4 AND r.aggregate_id = t.task_id::text
			AND r.repair = $5 AND r.created_at > $1::timestamptz - interval '1 millisecond' * $6)
		ORDER BY t.updated_at LIMIT $3`,
		now, s.p.Journey.ScanGrace.Milliseconds(), s.cfg.Batch, task.AggregateType, RepairTaskResettle, s.p.Journey.StuckAfter.Milliseconds())
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
