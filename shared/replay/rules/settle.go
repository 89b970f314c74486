package rules

import (
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Settle is the settle stage's rule for replay: what a replayed settle
// request would do to the task's credit reservation as it is now.
func Settle() preview.Rule {
	return preview.RuleOf(catalog.EventSettleRequested, func(env envelope.Envelope, p task.SettleRequested) (uuid.UUID, error) {
		if p.RenderID != uuid.Nil {
			return uuid.Nil, preview.Refusal("replay.render", "the settle of render %s is not replayed: the reconciler settles a finished render that still holds credits again by itself", p.RenderID)
		}
		return preview.PayloadTask(env, p)
	}, decideSettle)
}

func decideSettle(s preview.State, _ task.SettleRequested) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	if !task.SettleActs(t) {
		return preview.StaleNoop.Because("settle.not_over", "the task is %s: the settle that counts comes with its final transition, so the settle stage would record a stale no-op", at)
	}
	r := s.Effects.Reservation
	if r == nil {
		return preview.Refuse.Because("billing.no_reservation", "task %s holds no credit reservation: the settle stage would quarantine the event again", t.ID)
	}
	if r.Status != billing.Held {
		settled := ""
		if r.SettledAt != nil {
			settled = " at " + r.SettledAt.Format(time.RFC3339)
		}
		return preview.StaleNoop.Because("settle.already_settled", "reservation %s was %s%s (ledger rows: %d): the settle stage would record a stale no-op, and UNIQUE(ledger_business_type, business_id) refuses a second entry anyway",
			r.ReservationID, r.Status, settled, len(s.Effects.Ledger))
	}
	if t.Charged() {
		return preview.Act.Because("settle.capture", "the task is %s and reservation %s still HELD: the settle stage would capture its %d credits once (ledger key CAPTURE/%s)",
			at, r.ReservationID, r.Amount, r.ReservationID)
	}
	return preview.Act.Because("settle.release", "the task is %s and reservation %s still HELD: the settle stage would release its %d credits; nothing is charged",
		at, r.ReservationID, r.Amount)
}
