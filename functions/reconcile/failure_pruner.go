package reconcile

import (
	"cmp"
	"context"
	"time"

	"github.com/aivedio/pipeline/shared/quarantine"
)

// DefaultFailureRetention is how long a message's failure record outlives
// its last failure: far beyond any broker retry schedule, so what it
// prunes belongs to messages settled by a process that died before
// forgetting.
const DefaultFailureRetention = 7 * 24 * time.Hour

// FailurePrunerConfig configures the [FailurePruner].
type FailurePrunerConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Retention is DefaultFailureRetention when zero.
	Retention time.Duration
}

// FailurePruner deletes the delivery failure records of messages long
// gone.
type FailurePruner struct {
	loop
	p   Params
	cfg FailurePrunerConfig
}

// NewFailurePruner returns the pruner over p, configured by
// p.Maintenance.Failures.
func NewFailurePruner(p Params) *FailurePruner {
	p = defaults(p)
	cfg := p.Maintenance.Failures
	cfg.Retention = cmp.Or(cfg.Retention, DefaultFailureRetention)
	return &FailurePruner{loop: newLoop("failure_pruner", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *FailurePruner) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce prunes once and returns how many records it deleted.
func (s *FailurePruner) RunOnce(ctx context.Context) (int64, error) {
	return quarantine.PruneFailures(ctx, s.p.Pool, s.cfg.Retention)
}
