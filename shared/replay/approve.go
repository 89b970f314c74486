package replay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// Approve approves the dry run replayID under d, after checking its
// verdict again against the state now: the row becomes APPROVED and the
// report returned is the one approved. When the verdict is (or has
// become) a refusal, the row becomes REJECTED, and the error wraps
// [ErrRefused] with the reason. Its id is the approval id [Desk.Execute]
// takes.
func (desk *Desk) Approve(ctx context.Context, replayID uuid.UUID, d Decision) (Report, error) {
	if err := d.validate(); err != nil {
		return Report{}, err
	}
	var rep Report
	err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
		cur, err := lockReplay(ctx, tx, replayID)
		if err != nil {
			return err
		}
		if cur.Status != StatusDryRun {
			return fmt.Errorf("%w: replay %s is %s already (ticket %s, operator %s)", ErrDecided, replayID, cur.Status, cur.Ticket, cur.Operator)
		}
		if key := apiKeyOf(d.Operator); key != "" && key == apiKeyOf(cur.Operator) {
			return fmt.Errorf("%w: replay %s was planned with api key %s (%s); a replay is approved with another admin key, by another person",
				ErrSamePlanner, replayID, key, cur.Operator)
		}
		in, err := desk.reinspect(ctx, tx, cur)
		if err != nil {
			return err
		}
		rep = in.report
		return decide(ctx, tx, cur, &rep, d, in.now, false)
	})
	if err != nil {
		return Report{}, err
	}
	countDecision(rep.Status)
	if rep.Status == StatusRejected {
		return rep, refusal(rep.Verdict, "")
	}
	return rep, nil
}

// decide records decision d on the dry run cur, locked in tx, whose plan
// rep was checked again at now: cur and rep become APPROVED, or REJECTED
// when the verdict is a refusal. bulk marks a decision of
// [Desk.ApproveBulk].
func decide(ctx context.Context, tx pgx.Tx, cur Replay, rep *Report, d Decision, now time.Time, bulk bool) error {
	step := rep.step(StepApproved, now, d.Operator)
	step.Ticket, step.Reason, step.Bulk = d.Ticket, d.Reason, bulk
	rep.Status = StatusApproved
	if rep.Verdict.Action == preview.Refuse {
		step.Step, rep.Status = StepRefused, StatusRejected
	}
	return move(ctx, tx, cur, rep.Status, change{step: step, decision: &d, topic: rep.topic()})
}

// reinspect checks a recorded plan again: under the lock of its event and
// consumer, against the quarantine row and the task as they are now.
func (desk *Desk) reinspect(ctx context.Context, tx pgx.Tx, cur Replay) (inspection, error) {
	r, err := readRow(ctx, tx, cur.QuarantineID)
	if errors.Is(err, ErrNotFound) {
		now, err := dbNow(ctx, tx)
		if err != nil {
			return inspection{}, err
		}
		rep := *cur.Plan
		rep.Verdict = preview.Refuse.Because("quarantine.gone", "quarantined message %s no longer exists (pruned or deleted)", cur.QuarantineID)
		return inspection{report: rep, now: now}, nil
	}
	if err != nil {
		return inspection{}, err
	}
	return desk.inspectLocked(ctx, tx, r.Message, cur.ReplayID)
}

// inspectLocked inspects quarantine row m under the lock of its event
// and consumer, read again under it: a decision that held the lock may
// have replayed the message meanwhile. self is the replay being decided,
// uuid.Nil for a new one.
func (desk *Desk) inspectLocked(ctx context.Context, tx pgx.Tx, m quarantine.Message, self uuid.UUID) (inspection, error) {
	if err := quarantine.LockEvent(ctx, tx, m); err != nil {
		return inspection{}, err
	}
	r, err := readRow(ctx, tx, m.QuarantineID)
	if err != nil {
		return inspection{}, err
	}
	return desk.inspect(ctx, tx, r, self)
}

// apiKeyOf is the API key an operator string names ("alice (api key
// <id>)", or "api key <id>" when no person was named), "" when none: the
// command line names no key.
func apiKeyOf(operator string) string {
	i := strings.LastIndex(operator, "api key ")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(operator[i+len("api key "):], ")")
}
