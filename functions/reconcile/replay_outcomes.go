package reconcile

import (
	"context"
)

// ReplayOutcomes records the after-snapshot of replays executed since its
// last pass, through Params.Replays; a no-op without one.
type ReplayOutcomes struct {
	loop
	p Params
}

// NewReplayOutcomes returns the service over p; it runs every
// DefaultInterval.
func NewReplayOutcomes(p Params) *ReplayOutcomes {
	p = defaults(p)
	return &ReplayOutcomes{loop: newLoop("replay_outcomes", 0, p.Logger), p: p}
}

// Run records every DefaultInterval until ctx ends.
func (s *ReplayOutcomes) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce records once and returns how many replays it recorded.
func (s *ReplayOutcomes) RunOnce(ctx context.Context) (int, error) {
	if s.p.Replays == nil {
		return 0, nil
	}
	return s.p.Replays.RecordOutcomes(ctx)
}
