package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/retention"
)

// CodeOutsideWindow is the verdict code of an event older than the replay
// window; a decision refused for it wraps [ErrOutsideWindow].
const CodeOutsideWindow = "replay.outside_window"

// Where an event's time was read from (Report.EventTimeFrom).
const (
	TimeFromEventID    = "event_id"   // the time a UUIDv7 id carries
	TimeFromOutbox     = "outbox"     // the original outbox row's created_at
	TimeFromQuarantine = "quarantine" // when the message was quarantined
)

// original is the outbox row of the event r carries, read with package
// outbox's scanner; nil when r has no readable event id or the row is gone
// (relayed rows are pruned with their partition).
func original(ctx context.Context, q querier, r quarantine.Message) (*outbox.Stored, error) {
	id, err := uuid.Parse(r.EventID)
	if err != nil {
		return nil, nil
	}
	rows, _ := q.Query(ctx, `SELECT `+outbox.Columns+` FROM outbox_events WHERE event_id = $1`, id)
	s, err := pgx.CollectOneRow(rows, outbox.ScanStored) // a failed query's error too
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read the original outbox row of %s: %w", id, err)
	}
	return &s, nil
}

// eventTime is when the event of r was made, as far as the database can
// tell: the earliest of the time its UUIDv7 id carries, the created_at of
// its original outbox row orig while that row exists, and the time the
// message was quarantined (an event is never younger than its quarantine
// row). The envelope's occurred_at is not used: the producer wrote it, and
// a replayed or resent event keeps an old one.
//
// Earliest, because the inbox rows that deduplicate the event are pruned
// with the partition its id names (retention drops it once that day is
// past the window and nothing in it was written since): an id whose time
// is behind the other clues sits in an older partition, which goes first.
func eventTime(r quarantine.Message, orig *outbox.Stored) (time.Time, string) {
	at, from := r.ReceivedAt, TimeFromQuarantine
	if id, err := uuid.Parse(r.EventID); err == nil {
		if t, ok := retention.TimeOf(id); ok && t.Before(at) {
			at, from = t, TimeFromEventID
		}
	}
	if orig != nil && orig.CreatedAt.Before(at) {
		at, from = orig.CreatedAt, TimeFromOutbox
	}
	return at, from
}

// outsideWindow is the refusal of an event made at at, read from from,
// when it is older than window at now; nil when it is not.
func outsideWindow(r quarantine.Message, at time.Time, from string, now time.Time, window time.Duration) *preview.Verdict {
	age := now.Sub(at)
	if age <= window {
		return nil
	}
	clue := map[string]string{
		TimeFromEventID:    "the time in its UUIDv7 id",
		TimeFromOutbox:     "its original outbox row",
		TimeFromQuarantine: "when it was quarantined",
	}[from]
	v := preview.Refuse.Because(CodeOutsideWindow,
		"event %s was made %s ago (%s, by %s), longer ago than the replay window of %s (REPLAY_WINDOW): "+
			"the inbox records of %s for it may already be pruned, so the consumer could not tell that it applied the event and could apply it twice. "+
			"It is not replayed; check the task's state above and redo the step it is missing with a new request",
		r.EventID, span(age), at.Format(time.RFC3339), clue, span(window), r.Consumer)
	return &v
}

// span writes a duration for a person: days past two days, else hours and
// minutes.
func span(d time.Duration) string {
	if d >= 48*time.Hour {
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	}
	return d.Round(time.Minute).String()
}
