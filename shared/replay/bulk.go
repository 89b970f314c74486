package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// BulkReport is a bulk dry run, or what a bulk approval decided.
type BulkReport struct {
	Filter quarantine.Filter `json:"filter"`
	// Matched counts the open quarantine rows the filter selects, and
	// Messages the events among them: copies of one event count once and
	// are replayed once.
	Matched  int `json:"matched"`
	Messages int `json:"messages"`
	// Planned counts the messages planned here: Messages, or the first
	// Filter.Limit of them, oldest first.
	Planned int                    `json:"planned"`
	Counts  map[preview.Action]int `json:"counts"`
	Items   []BulkItem             `json:"items"`
	// Ticket, Approved, Rejected and AlreadyApproved are set by
	// [Desk.ApproveBulk].
	Ticket          string `json:"ticket,omitempty"`
	Approved        int    `json:"approved,omitempty"`
	Rejected        int    `json:"rejected,omitempty"`
	AlreadyApproved int    `json:"already_approved,omitempty"`
}

// BulkItem is one message of a bulk replay.
type BulkItem struct {
	QuarantineID uuid.UUID       `json:"quarantine_id"`
	EventID      string          `json:"event_id,omitempty"`
	EventType    string          `json:"event_type,omitempty"`
	TaskID       string          `json:"task_id,omitempty"`
	TaskStatus   string          `json:"task_status,omitempty"`
	TaskVersion  int64           `json:"task_version,omitempty"`
	ErrorCode    string          `json:"error_code"`
	Copies       int             `json:"copies,omitempty"`
	Verdict      preview.Verdict `json:"verdict"`
	// ReplayID and Status are set by [Desk.ApproveBulk]: the approval (or
	// refusal) recorded for the message. Status ALREADY_APPROVED means an
	// earlier approval under the same ticket covers it; nothing was
	// recorded again.
	ReplayID *uuid.UUID `json:"replay_id,omitempty"`
	Status   string     `json:"status,omitempty"`
}

// statusAlreadyApproved marks a bulk item covered by an earlier approval
// under the same ticket.
const statusAlreadyApproved = "ALREADY_APPROVED"

// bulkFilter checks and completes the filter of a bulk replay.
func bulkFilter(f quarantine.Filter) (quarantine.Filter, error) {
	if f.Consumer == "" {
		return f, invalidf("a bulk replay needs a consumer group")
	}
	if _, ok := quarantine.GroupOf(f.Consumer); !ok {
		return f, invalidf("consumer group %q is not in the catalog", f.Consumer)
	}
	if f.Status != "" && f.Status != quarantine.Quarantined {
		return f, invalidf("a bulk replay takes only %s messages, not %s", quarantine.Quarantined, f.Status)
	}
	f, err := f.Normalize()
	if err != nil {
		return f, fmt.Errorf("%w: %w", ErrInvalid, err) // matches quarantine.ErrInvalid too
	}
	return f, nil
}

// PlanBulk is the dry run of a bulk replay: the verdict of every open
// message of one consumer group that f selects, counted by action. It
// reads only.
func (desk *Desk) PlanBulk(ctx context.Context, f quarantine.Filter) (BulkReport, error) {
	return desk.bulk(ctx, f, nil, 0)
}

// ApproveBulk approves a bulk replay under one decision: every message f
// selects is checked as [Desk.Approve] checks one, and gets its own
// message_replays row, APPROVED or REJECTED, with its plan and the
// decision. A message already approved under the same ticket is left as
// it is, so the call may be repeated. When expect is positive it is the
// number of messages the dry run showed: if the filter now selects another
// number, nothing is approved and the error wraps [ErrChanged].
func (desk *Desk) ApproveBulk(ctx context.Context, f quarantine.Filter, d Decision, expect int) (BulkReport, error) {
	return desk.bulk(ctx, f, &d, expect)
}

// bulk is a bulk dry run when d is nil, else a bulk approval under d.
func (desk *Desk) bulk(ctx context.Context, f quarantine.Filter, d *Decision, expect int) (BulkReport, error) {
	f, err := bulkFilter(f)
	if err == nil && d != nil {
		err = d.validate()
	}
	if err != nil {
		return BulkReport{}, err
	}
	sel, err := quarantine.SelectEvents(ctx, desk.db, f)
	if err != nil {
		return BulkReport{}, err
	}
	if d != nil && expect > 0 && sel.Events != expect {
		return BulkReport{}, fmt.Errorf("%w: the filter selects %d messages now, the dry run showed %d; run the dry run again", ErrChanged, sel.Events, expect)
	}
	b := BulkReport{Filter: f, Matched: sel.Matched, Messages: sel.Events, Planned: len(sel.Oldest),
		Counts: map[preview.Action]int{preview.Act: 0, preview.StaleNoop: 0, preview.Refuse: 0}, Items: []BulkItem{}}
	if d != nil {
		b.Ticket = d.Ticket
	}
	for _, r := range sel.Oldest {
		var (
			in     inspection
			status string
		)
		if d != nil {
			in, status, err = desk.approveOne(ctx, f, r, *d)
		} else {
			in, err = desk.inspect(ctx, desk.db, r, uuid.Nil)
		}
		if err != nil {
			return BulkReport{}, err
		}
		b.add(in.report, status)
	}
	return b, nil
}

// approveOne records the approval or refusal of one message of a bulk: its
// plan and the decision on it, in one transaction.
func (desk *Desk) approveOne(ctx context.Context, f quarantine.Filter, r quarantine.Stored, d Decision) (inspection, string, error) {
	var (
		in     inspection
		status string
	)
	err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
		var err error
		if in, err = desk.inspectLocked(ctx, tx, r.Message, uuid.Nil); err != nil {
			return err
		}
		if in.report.Verdict.Code == "replay.already_replayed" && coveredBy(in.report.PriorReplays, d.Ticket) {
			status = statusAlreadyApproved
			return nil
		}
		cur, err := record(ctx, tx, &in, d.Operator, &f)
		if err != nil {
			return err
		}
		err = decide(ctx, tx, cur, &in.report, d, in.now, true)
		status = string(in.report.Status)
		return err
	})
	if err != nil {
		return inspection{}, "", err
	}
	if status != statusAlreadyApproved {
		countStep(StepPlanned)
		countDecision(in.report.Status)
	}
	return in, status, nil
}

// coveredBy reports whether an approved or executed replay under ticket is
// among priors.
func coveredBy(priors []Prior, ticket string) bool {
	return slices.ContainsFunc(priors, func(p Prior) bool { return p.Ticket == ticket && decided(p.Status) })
}

// add counts one message; status is its approval status, if any.
func (b *BulkReport) add(rep Report, status string) {
	item := BulkItem{
		QuarantineID: rep.Message.QuarantineID, EventID: rep.Message.EventID, EventType: rep.Message.EventType,
		ErrorCode: rep.Message.ErrorCode, Copies: len(rep.Copies), Verdict: rep.Verdict, Status: status,
	}
	if rep.Event != nil {
		item.EventType = rep.Event.EventType
	}
	if rep.Task != nil {
		item.TaskID, item.TaskStatus, item.TaskVersion = rep.Task.TaskID.String(), rep.Task.Status, rep.Task.Version
	}
	switch Status(status) {
	case StatusApproved:
		b.Approved++
	case StatusRejected:
		b.Rejected++
	case statusAlreadyApproved:
		b.AlreadyApproved++
	}
	if rep.ReplayID != uuid.Nil { // a row was recorded for it
		item.ReplayID = &rep.ReplayID
	}
	b.Counts[rep.Verdict.Action]++
	b.Items = append(b.Items, item)
}

// BulkExecution is what executing a ticket did.
type BulkExecution struct {
	Ticket   string      `json:"ticket"`
	Consumer string      `json:"consumer,omitempty"`
	Executed []Execution `json:"executed"`
	// AlreadyExecuted counts the approvals of the ticket executed before.
	AlreadyExecuted int           `json:"already_executed"`
	Refused         []BulkFailure `json:"refused"`
	// Failed are executions that failed for want of the database; they
	// stay APPROVED and the next call tries them again.
	Failed []BulkFailure `json:"failed"`
}

// BulkFailure is an approval that was not executed, and why.
type BulkFailure struct {
	ReplayID uuid.UUID `json:"replay_id"`
	Reason   string    `json:"reason"`
}

// ExecuteBulkParams name the approvals [Desk.ExecuteBulk] runs.
type ExecuteBulkParams struct {
	Ticket string
	// Consumer narrows the run to one consumer group; empty runs every
	// approval of the ticket.
	Consumer string
	// Operator is who executes.
	Operator string
}

// ExecuteBulk executes every approval recorded under the ticket that is
// not executed yet, each as [Desk.Execute] does, one transaction each.
// Refusals and failures are listed and do not stop the others; calling it
// again executes only what is left.
func (desk *Desk) ExecuteBulk(ctx context.Context, p ExecuteBulkParams) (BulkExecution, error) {
	if err := cmp.Or(checkWord("ticket", p.Ticket, maxTicket), checkWord("operator", p.Operator, maxOperator)); err != nil {
		return BulkExecution{}, err
	}
	x := BulkExecution{Ticket: p.Ticket, Consumer: p.Consumer, Executed: []Execution{}, Refused: []BulkFailure{}, Failed: []BulkFailure{}}
	rows, _ := desk.db.Query(ctx, `SELECT replay_id, status FROM message_replays
		WHERE ticket = $1 AND ($2 = '' OR consumer_name = $2) AND status IN ($3, $4)
		ORDER BY created_at, replay_id`, p.Ticket, p.Consumer, StatusApproved, StatusExecuted)
	type approval struct {
		ID     uuid.UUID
		Status Status
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[approval]) // a failed query's error too
	if err != nil {
		return BulkExecution{}, fmt.Errorf("list approvals of ticket %s: %w", p.Ticket, err)
	}
	for _, a := range found {
		if a.Status == StatusExecuted {
			x.AlreadyExecuted++
			continue
		}
		if err := ctx.Err(); err != nil {
			return x, err
		}
		e, err := desk.Execute(ctx, a.ID, p.Operator)
		switch {
		case errors.Is(err, ErrRefused):
			x.Refused = append(x.Refused, BulkFailure{ReplayID: a.ID, Reason: err.Error()})
		case err != nil:
			x.Failed = append(x.Failed, BulkFailure{ReplayID: a.ID, Reason: err.Error()})
		case e.AlreadyExecuted:
			x.AlreadyExecuted++ // executed meanwhile by another call
		default:
			x.Executed = append(x.Executed, e)
		}
	}
	return x, nil
}
