package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// WaitlistWakerConfig configures the [WaitlistWaker].
type WaitlistWakerConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the wake-ups of one pass; DefaultBatch when zero.
	Batch int
}

// WaitlistWaker repairs lost wake-ups of the slot wait list: a scope that
// has room while tasks wait for it (a lease expired instead of being
// released, a process died between a release and its handoff, a rebuild
// freed a slot) hands the room to its best waiters, as a release would
// have. Each wake-up writes a repair row.
type WaitlistWaker struct {
	loop
	p   Params
	cfg WaitlistWakerConfig
}

// NewWaitlistWaker returns the waker over p, configured by
// p.Maintenance.Waitlist.
func NewWaitlistWaker(p Params) *WaitlistWaker {
	p = defaults(p)
	cfg := p.Maintenance.Waitlist
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	return &WaitlistWaker{loop: newLoop("waitlist_waker", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *WaitlistWaker) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass and returns how many tasks it woke; none without
// a wait list.
func (s *WaitlistWaker) RunOnce(ctx context.Context) (int, error) {
	if s.p.Waitlist == nil {
		return 0, nil
	}
	scopes, err := waitlist.Waiting(ctx, s.p.Pool, s.cfg.Batch)
	if err != nil {
		return 0, err
	}
	woke := 0
	for _, scope := range scopes {
		for woke < s.cfg.Batch {
			id, err := s.p.Waitlist.WakeIdle(ctx, scope, func(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
				return record(ctx, tx, repair{Kind: RepairWaitlistWake, AggregateType: task.AggregateType, AggregateID: id.String(),
					Reason: fmt.Sprintf("%s had room while the task waited for it: its wake-up was lost", scope)})
			})
			if err != nil {
				return woke, err
			}
			if id == uuid.Nil {
				break
			}
			woke++
		}
	}
	return woke, nil
}
