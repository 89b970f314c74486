package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// SlotRebuilderConfig configures the [SlotRebuilder].
type SlotRebuilderConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the scopes one pass rebuilds; DefaultBatch. The next
	// pass carries on after the last scope rebuilt, so every scope is
	// rebuilt within a few passes however many there are.
	Batch int
}

// inFlight are the states in which a task holds its concurrency slots:
// from the submit that took them until its provider job ended.
var inFlight = []task.Status{task.Submitting, task.ProviderRunning, task.Reconciling, task.CancelReconciling}

// SlotRebuilder resets every concurrency-slot scope that tasks touched
// within SLOT_LEASE to exactly the tasks PostgreSQL has in flight (and
// those the wait list woke, which hold their slots already): a Redis
// that lost its data gets them back, and a slot a crashed stage left behind
// is freed before its lease would end. A submit that took its slot but has
// not yet committed SUBMITTING loses the entry for a moment, so one job
// more than the limit may start; the next pass counts it again.
type SlotRebuilder struct {
	loop
	p   Params
	cfg SlotRebuilderConfig

	mu    sync.Mutex
	after string // the last scope rebuilt: the next pass starts past it
}

// NewSlotRebuilder returns the rebuilder over p, configured by
// p.Maintenance.Slots.
func NewSlotRebuilder(p Params) *SlotRebuilder {
	p = defaults(p)
	cfg := p.Maintenance.Slots
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	return &SlotRebuilder{loop: newLoop("slot_rebuilder", cfg.Interval, p.Logger), p: p, cfg: cfg}
}

// Run makes a pass every Interval until ctx ends.
func (s *SlotRebuilder) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass and returns how many scopes it rebuilt; none
// without a slot limiter.
func (s *SlotRebuilder) RunOnce(ctx context.Context) (int, error) {
	if s.p.Slots == nil {
		return 0, nil
	}
	rows, err := s.p.Pool.Query(ctx, `SELECT task_id, tenant_id, model, coalesce(provider, ''), status = ANY($1) FROM generation_tasks
		WHERE updated_at > now() - interval '1 millisecond' * $2 AND provider IS NOT NULL`,
		inFlight, s.p.Journey.SlotLease.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("scan slot holders: %w", err)
	}
	holders := map[string][]string{} // scope -> holders in flight
	var t task.Task
	var holding bool
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.TenantID, &t.Model, &t.Provider, &holding}, func() error {
		for _, scope := range stage.GenerationSlots(t, t.Provider, s.p.Journey).Scopes {
			if _, ok := holders[scope.Name]; !ok {
				holders[scope.Name] = []string{}
			}
			if holding {
				holders[scope.Name] = append(holders[scope.Name], t.ID.String())
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("scan slot holders: %w", err)
	}
	// A task the wait list woke holds its slots before its submit moves it
	// to SUBMITTING.
	woken, err := waitlist.Woken(ctx, s.p.Pool)
	if err != nil {
		return 0, err
	}
	for _, h := range woken {
		t := task.Task{ID: h.TaskID, TenantID: h.TenantID, Model: h.Model}
		for _, scope := range stage.GenerationSlots(t, h.Provider, s.p.Journey).Scopes {
			if !slices.Contains(holders[scope.Name], t.ID.String()) {
				holders[scope.Name] = append(holders[scope.Name], t.ID.String())
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, scope := range s.next(holders) {
		hs := holders[scope]
		if err := s.p.Slots.Rebuild(ctx, scope, hs, s.p.Journey.SlotLease); err != nil {
			return 0, err
		}
		s.after = scope
		if err := record(ctx, s.p.Pool, repair{Kind: RepairSlotsRebuild, AggregateType: slotScopeAggregateType, AggregateID: scope,
			Reason: fmt.Sprintf("reset to the %d tasks in flight", len(hs))}); err != nil {
			return 0, err
		}
	}
	return min(len(holders), s.cfg.Batch), nil
}

// next is the scopes of this pass: at most Batch, in name order, starting
// past the last one rebuilt and wrapping round.
func (s *SlotRebuilder) next(holders map[string][]string) []string {
	scopes := make([]string, 0, len(holders))
	for scope := range holders {
		scopes = append(scopes, scope)
	}
	slices.Sort(scopes)
	i, _ := slices.BinarySearch(scopes, s.after)
	if i < len(scopes) && scopes[i] == s.after {
		i++
	}
	scopes = slices.Concat(scopes[i:], scopes[:i])
	return scopes[:min(len(scopes), s.cfg.Batch)]
}
