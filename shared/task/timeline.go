package task

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// TimelineEntry is one task_events row: a transition, as Apply recorded it.
type TimelineEntry struct {
	Version int64     `json:"version"`
	From    string    `json:"from,omitempty"`
	To      string    `json:"to"`
	Reason  string    `json:"reason,omitempty"`
	EventID string    `json:"event_id,omitempty"`
	At      time.Time `json:"at"`
}

// Timeline reads the latest n transitions of task id, oldest first.
func Timeline(ctx context.Context, q Querier, id uuid.UUID, n int) ([]TimelineEntry, error) {
	rows, err := q.Query(ctx, `SELECT version, coalesce(from_status, ''), to_status, coalesce(reason, ''), coalesce(event_id::text, ''), created_at
		FROM (SELECT * FROM task_events WHERE task_id = $1 ORDER BY version DESC LIMIT $2) latest ORDER BY version`, id, n)
	if err != nil {
		return nil, fmt.Errorf("read timeline of task %s: %w", id, err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TimelineEntry, error) {
		var e TimelineEntry
		err := r.Scan(&e.Version, &e.From, &e.To, &e.Reason, &e.EventID, &e.At)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read timeline of task %s: %w", id, err)
	}
	return entries, nil
}
