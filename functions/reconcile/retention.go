package reconcile

import (
	"context"

	"github.com/aivedio/pipeline/shared/retention"
)

// RetentionKeeper keeps the outbox and the inbox bounded: partitions made
// ahead, partitions past REPLAY_WINDOW dropped (package retention says
// when it may). A step whose lock was busy is in the report and waits for
// the next pass; only a failure of the database fails the pass.
type RetentionKeeper struct {
	loop
	p Params
}

// NewRetentionKeeper returns the keeper over p; it runs every
// DefaultInterval.
func NewRetentionKeeper(p Params) *RetentionKeeper {
	p = defaults(p)
	return &RetentionKeeper{loop: newLoop("retention_keeper", 0, p.Logger), p: p}
}

// Run keeps every DefaultInterval until ctx ends.
func (s *RetentionKeeper) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce keeps once.
func (s *RetentionKeeper) RunOnce(ctx context.Context) (retention.Report, error) {
	return retention.Maintain(ctx, s.p.Pool, retention.Params{Window: s.p.ReplayWindow, Logger: s.p.Logger})
}
