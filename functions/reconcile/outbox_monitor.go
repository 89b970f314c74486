package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// OutboxReport is what one look of the [OutboxMonitor] found.
type OutboxReport struct {
	StaleRows         int           // unpublished rows older than OUTBOX_STALE_AFTER
	OldestUnpublished time.Duration // age of the oldest unpublished row
}

// OutboxMonitor warns when outbox rows are not being published: the relay
// is down or the broker unreachable. It repairs nothing; people do.
type OutboxMonitor struct {
	loop
	p Params
}

// NewOutboxMonitor returns the monitor over p; it runs every
// DefaultInterval.
func NewOutboxMonitor(p Params) *OutboxMonitor {
	p = defaults(p)
	return &OutboxMonitor{loop: newLoop("outbox_monitor", 0, p.Logger), p: p}
}

// Run looks every DefaultInterval until ctx ends.
func (s *OutboxMonitor) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce looks once at the clock's time.
func (s *OutboxMonitor) RunOnce(ctx context.Context) (OutboxReport, error) {
	return s.pass(ctx, clock(s.p))
}

func (s *OutboxMonitor) pass(ctx context.Context, now time.Time) (OutboxReport, error) {
	var rep OutboxReport
	var oldest float64
	if err := s.p.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at < $1::timestamptz - interval '1 millisecond' * $2),
			coalesce(extract(epoch FROM $1::timestamptz - min(created_at)), 0)
		FROM outbox_events WHERE published_at IS NULL AND available_at <= $1::timestamptz`,
		now, s.p.Journey.OutboxStale.Milliseconds()).Scan(&rep.StaleRows, &oldest); err != nil {
		return rep, fmt.Errorf("scan outbox: %w", err)
	}
	rep.OldestUnpublished = time.Duration(oldest * float64(time.Second))
	if rep.StaleRows > 0 {
		s.p.Logger.WarnContext(ctx, "outbox rows are not being published: is the relay running and the broker reachable?",
			slog.Int("stale_rows", rep.StaleRows), slog.Duration("oldest", rep.OldestUnpublished))
	}
	return rep, nil
}
