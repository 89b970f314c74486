package replay

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/quarantine"
)

// Discarded is what discarding a message did.
type Discarded struct {
	QuarantineID uuid.UUID          `json:"quarantine_id"`
	Consumer     string             `json:"consumer"`
	EventID      string             `json:"event_id,omitempty"`
	Discard      quarantine.Discard `json:"discard"`
	// Rows counts the quarantine rows discarded: the message and the other
	// open rows of its event for the same consumer.
	Rows int64 `json:"rows"`
}

// Discard closes a quarantined message for good without sending it: the
// seed's other way out of the quarantine, for a message nobody should
// replay (test traffic, a payload the producer has since fixed, dirty
// history). It is decided under a ticket by an operator with a reason,
// like an approval, and recorded on the row. It takes the same lock as a
// replay's decisions, so a message is either replayed or discarded; a
// replay approved earlier is refused when it is executed. A message that
// is not open is [ErrNotOpen].
func (desk *Desk) Discard(ctx context.Context, quarantineID uuid.UUID, d Decision) (Discarded, error) {
	if err := d.validate(); err != nil {
		return Discarded{}, err
	}
	var out Discarded
	err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
		r, err := readRow(ctx, tx, quarantineID)
		if err != nil {
			return err
		}
		if err := quarantine.LockEvent(ctx, tx, r.Message); err != nil {
			return err
		}
		now, err := dbNow(ctx, tx)
		if err != nil {
			return err
		}
		audit := quarantine.Discard{At: now, Operator: d.Operator, Ticket: d.Ticket, Reason: d.Reason}
		n, err := quarantine.MarkDiscarded(ctx, tx, quarantineID, audit)
		if err != nil {
			return err
		}
		out = Discarded{QuarantineID: quarantineID, Consumer: r.Consumer, EventID: r.EventID, Discard: audit, Rows: n}
		return nil
	})
	if err != nil {
		return Discarded{}, fmt.Errorf("discard %s: %w", quarantineID, err)
	}
	countStep(metricDiscarded)
	return out, nil
}
