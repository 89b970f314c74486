package replay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/task"
)

// Ref names a quarantined message.
type Ref struct {
	// ID is its quarantine id, or the id of the event it carries.
	ID uuid.UUID
	// Consumer picks the consumer group when the event is quarantined for
	// several; empty otherwise.
	Consumer string
}

// Plan is the dry run of replaying the message ref names: it reads the
// message, the task's state and side effects, gives the verdict, and
// records it as a DRY_RUN row of message_replays whose id the report
// carries. operator is who asked; nothing is sent.
func (desk *Desk) Plan(ctx context.Context, ref Ref, operator string) (Report, error) {
	if err := checkWord("operator", operator, maxOperator); err != nil {
		return Report{}, err
	}
	if ref.ID == uuid.Nil {
		return Report{}, invalidf("an event id or quarantine id is required")
	}
	var in inspection
	err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
		r, err := resolve(ctx, tx, ref)
		if err != nil {
			return err
		}
		if in, err = desk.inspect(ctx, tx, r, uuid.Nil); err != nil {
			return err
		}
		_, err = record(ctx, tx, &in, operator, nil)
		return err
	})
	if err != nil {
		return Report{}, err
	}
	countStep(StepPlanned)
	return in.report, nil
}

// resolve finds the quarantine row ref names (quarantine.Find), under
// this package's errors.
func resolve(ctx context.Context, q querier, ref Ref) (quarantine.Stored, error) {
	r, err := quarantine.Find(ctx, q, ref.ID, ref.Consumer)
	switch {
	case errors.Is(err, quarantine.ErrNotFound):
		of := ""
		if ref.Consumer != "" {
			of = " of " + ref.Consumer
		}
		return r, fmt.Errorf("%w: no message%s in quarantine has quarantine id or event id %s", ErrNotFound, of, ref.ID)
	case err == nil && ref.Consumer != "" && ref.Consumer != r.Consumer:
		return r, invalidf("quarantined message %s belongs to %s, not %s", ref.ID, r.Consumer, ref.Consumer)
	}
	return r, err
}

// inspection is a report with what deciding and executing it need.
type inspection struct {
	report Report
	now    time.Time     // when it was checked, by the database's clock
	topic  catalog.Topic // valid when report.Target is set
}

// inspect builds the report of r as things are now, by the database's
// clock. self is the replay being decided, left out of the earlier
// replays; uuid.Nil for a new one.
func (desk *Desk) inspect(ctx context.Context, q querier, r quarantine.Stored, self uuid.UUID) (inspection, error) {
	now, err := dbNow(ctx, q)
	if err != nil {
		return inspection{}, err
	}
	in := inspection{now: now, report: Report{
		ReplayID: self, Status: StatusDryRun, PlannedAt: now, Message: r.Message,
		Effects: preview.Effects{Attempts: []preview.Attempt{}, Assets: []preview.Asset{}, Ledger: []billing.LedgerEntry{}},
	}}
	rep := &in.report
	if rep.Copies, err = quarantine.Copies(ctx, q, r.Message); err != nil {
		return inspection{}, err
	}
	eventID, _ := uuid.Parse(r.EventID)
	if eventID != uuid.Nil {
		if rep.PriorReplays, err = priors(ctx, q, r.Consumer, eventID, self); err != nil {
			return inspection{}, err
		}
		if rep.Effects.Inbox, err = inbox.Lookup(ctx, q, r.Consumer, eventID); err != nil {
			return inspection{}, err
		}
	}

	orig, err := original(ctx, q, r.Message)
	if err != nil {
		return inspection{}, err
	}
	rep.EventTime, rep.EventTimeFrom = eventTime(r.Message, orig)
	rep.ReplayWindow = desk.window
	tooOld := outsideWindow(r.Message, rep.EventTime, rep.EventTimeFrom, now, desk.window)

	env, envErr := r.Event()
	if envErr != nil {
		rep.EventError = envErr.Error()
	} else {
		rep.Event = &env
	}
	group, known := quarantine.GroupOf(r.Consumer)
	rl, hasRule := desk.rules[r.Consumer]

	var destErr error
	if envErr == nil && known {
		var dest Destination
		dest, in.topic, destErr = destination(r.Message, env, group, orig)
		if destErr == nil {
			rep.Target = &dest
		}
	}
	var (
		tgt     preview.Target
		refused *preview.Verdict // by the rule, whatever the task's state
	)
	if envErr == nil && hasRule && env.EventType == rl.EventType() {
		tgt, refused = rl.Parse(env)
	}
	var t task.Task
	taskErr := task.ErrNotFound
	if tgt.TaskID != uuid.Nil {
		t, taskErr = task.Get(ctx, q, tgt.TaskID)
		switch {
		case errors.Is(taskErr, task.ErrNotFound):
		case taskErr != nil:
			return inspection{}, taskErr
		default:
			if rep.Task, err = preview.ReadTaskState(ctx, q, t); err != nil {
				return inspection{}, err
			}
			committed := rep.Effects.Inbox
			if rep.Effects, err = preview.ReadEffects(ctx, q, t); err != nil {
				return inspection{}, err
			}
			rep.Effects.Inbox = committed
		}
	}

	// The verdict: the first reason to refuse, else the stage's rule.
	var refusedBy *Prior
	if i := slices.IndexFunc(rep.PriorReplays, func(p Prior) bool { return decided(p.Status) }); i >= 0 {
		refusedBy = &rep.PriorReplays[i]
	}
	switch {
	case !r.Open():
		rep.Verdict = preview.Refuse.Because("quarantine."+strings.ToLower(string(r.Status)), "the message is %s already; a quarantined message is replayed once", r.Status)
	case tooOld != nil:
		rep.Verdict = *tooOld
	case !known:
		rep.Verdict = preview.Refuse.Because("consumer.unknown", "consumer group %q is not in the catalog: nothing would take the replay", r.Consumer)
	case envErr != nil:
		code := "envelope.unreadable"
		if class, ok := envelope.ClassOf(envErr); ok {
			code = "envelope." + string(class)
		}
		rep.Verdict = preview.Refuse.Because(code, "the message is not a valid event (%v): the same bytes would be refused the same way", envErr)
	case !hasRule:
		rep.Verdict = preview.Refuse.Because("replay.no_rule", "no stage consumes %s in this build, so nothing can say what a replay would do", r.Consumer)
	case env.EventType != rl.EventType():
		rep.Verdict = preview.Refuse.Because("event.type_not_handled", "%s handles %s, not %s: the stage would quarantine it again", r.Consumer, rl.EventType(), env.EventType)
	case r.ErrorCode == "inbox.payload_mismatch":
		rep.Verdict = preview.Refuse.Because("inbox.payload_mismatch", "%s already processed a different payload under event id %s: the producer reused an id, and replaying this one would apply a second, conflicting fact", r.Consumer, r.EventID)
	case refusedBy != nil:
		rep.Verdict = preview.Refuse.Because("replay.already_replayed", "event %s is already %s for replay to %s (replay %s, ticket %s, operator %s)",
			r.EventID, refusedBy.Status, r.Consumer, refusedBy.ReplayID, refusedBy.Ticket, refusedBy.Operator)
	case destErr != nil:
		rep.Verdict = preview.Refuse.Because("topic.unknown", "%v", destErr)
	case refused != nil:
		rep.Verdict = *refused
	case errors.Is(taskErr, task.ErrNotFound):
		rep.Verdict = preview.Refuse.Because("task.not_found", "task %s does not exist: the stage would quarantine the event again", tgt.TaskID)
	case env.TenantID != t.TenantID.String():
		rep.Verdict = preview.Refuse.Because("security.tenant_mismatch", "the event names tenant %s but task %s belongs to another tenant: never replayed", env.TenantID, t.ID)
	default:
		rep.Verdict = tgt.Decide(preview.State{Env: env, Task: t, Effects: rep.Effects, Now: now})
	}
	return in, nil
}

// dbNow is the database's clock, so that audit times agree with the
// columns it fills itself.
func dbNow(ctx context.Context, q querier) (time.Time, error) {
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now.UTC(), nil
}
