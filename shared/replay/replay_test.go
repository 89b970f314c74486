package replay_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

var approval = replay.Decision{Ticket: "OPS-42", Operator: "bob", Reason: "provider outage is over"}

func TestSubmitForRunningTaskIsStaleNoop(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tk, submit := b.taskAt(t, b.tenant(t), task.ProviderRunning)
	qid := b.quarantine(t, entry(t, catalog.GroupSubmit, submit, "task.contended"))[0]

	plan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(submit.EventID)}, "alice")
	require.NoError(t, err)
	require.Equal(t, preview.StaleNoop, plan.Verdict.Action, plan.Verdict.Reason)
	require.Equal(t, "submit.not_queued", plan.Verdict.Code)
	require.Equal(t, replay.StatusDryRun, plan.Status)

	// What the message is.
	require.Equal(t, qid, plan.Message.QuarantineID)
	require.Equal(t, catalog.GroupSubmit.Name, plan.Message.Consumer)
	require.Equal(t, "task.contended", plan.Message.ErrorCode)
	require.Equal(t, 1, plan.Message.DeliveryAttempt)
	require.NotNil(t, plan.Event)
	require.Equal(t, catalog.EventSubmitRequested, plan.Event.EventType)
	require.JSONEq(t, string(submit.Payload), string(plan.Event.Payload))
	require.Equal(t, &replay.Destination{Topic: catalog.GenerationSubmit.Name, Tag: catalog.EventSubmitRequested, From: "outbox"}, plan.Target)

	// The state it would meet, and what was done already.
	require.NotNil(t, plan.Task)
	require.Equal(t, string(task.ProviderRunning), plan.Task.Status)
	require.Equal(t, tk.Version, plan.Task.Version)
	require.Len(t, plan.Task.Timeline, 3)
	require.Equal(t, string(task.ProviderRunning), plan.Task.Timeline[2].To)
	require.Len(t, plan.Effects.Attempts, 1)
	require.Equal(t, "ACCEPTED", plan.Effects.Attempts[0].Status)
	require.Equal(t, "job-"+tk.ID.String(), plan.Effects.Attempts[0].ProviderJobID)
	require.NotNil(t, plan.Effects.Reservation)
	require.Equal(t, billing.Held, plan.Effects.Reservation.Status)
	require.Empty(t, plan.Effects.Ledger)
	require.Nil(t, plan.Effects.Inbox, "the consumer never committed the event")

	approved, err := b.desk.Approve(ctx, plan.ReplayID, approval)
	require.NoError(t, err)
	require.Equal(t, replay.StatusApproved, approved.Status)
	require.Equal(t, plan.ReplayID, approved.ReplayID)

	x, err := b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.NoError(t, err)
	require.False(t, x.AlreadyExecuted)
	require.Equal(t, uuid.MustParse(submit.EventID), x.OriginalEventID)
	require.NotEqual(t, x.OriginalEventID, x.ReplayEventID)
	require.EqualValues(t, 1, x.QuarantineReplayed)

	sent := b.replays(t, submit.EventID)
	require.Len(t, sent, 1, "one outbox row")
	got := sent[0]
	require.Equal(t, x.ReplayEventID.String(), got.Envelope.EventID)
	require.Equal(t, submit.EventID, got.Envelope.CausationID)
	require.Equal(t, submit.EventType, got.Envelope.EventType)
	require.Equal(t, submit.AggregateType, got.Envelope.AggregateType)
	require.Equal(t, submit.AggregateID, got.Envelope.AggregateID)
	require.Equal(t, submit.TenantID, got.Envelope.TenantID)
	require.Equal(t, submit.CorrelationID, got.Envelope.CorrelationID)
	require.Equal(t, string(submit.Payload), string(got.Envelope.Payload))
	require.Equal(t, replay.Producer, got.Envelope.Producer)
	require.Equal(t, catalog.GenerationSubmit, got.Topic)
	require.Equal(t, catalog.EventSubmitRequested, got.Tag)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM message_quarantine WHERE status = 'REPLAYED'`))

	// The submit stage receiving it would find the task past submission
	// (the verdict), and could not make a second attempt for it anyway:
	// the attempt's provider idempotency key is unique.
	_, err = b.pool.Exec(ctx, `INSERT INTO task_attempts (task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id)
		VALUES ($1, 2, $2, 'acme/video-1', $3, 'again')`, tk.ID, provider, plan.Effects.Attempts[0].IdempotencyKey)
	requireUnique(t, err, "task_attempts_provider_idempotency_key_key")

	// Executing again writes nothing.
	again, err := b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.NoError(t, err)
	require.True(t, again.AlreadyExecuted)
	require.Equal(t, x.ReplayEventID, again.ReplayEventID)
	require.Equal(t, x.Target, again.Target)
	require.Len(t, b.replays(t, submit.EventID), 1)
}

func TestSettleReplayedTwiceChargesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tk, _ := b.taskAt(t, b.tenant(t), task.Succeeded)
	settle := event(t, tk, catalog.EventSettleRequested, task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded})
	// Quarantined twice: drained from the DLQ, and refused by the adapter
	// under another payload (the same payload would be one row).
	ids := b.quarantine(t, deadLetter(t, catalog.GroupSettle, settle), reused(entry(t, catalog.GroupSettle, settle, "billing.timeout")))

	plan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(settle.EventID)}, "alice")
	require.NoError(t, err)
	require.Equal(t, preview.Act, plan.Verdict.Action, plan.Verdict.Reason)
	require.Equal(t, "settle.held", plan.Verdict.Code)
	require.Equal(t, ids[0], plan.Message.QuarantineID, "the oldest open copy")
	require.Equal(t, []uuid.UUID{ids[1]}, plan.Copies)
	require.Equal(t, "catalog", plan.Target.From, "a dead letter without its outbox row: the group's subscription")
	require.Equal(t, catalog.BillingSettle.Name, plan.Target.Topic)

	_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
	require.NoError(t, err)

	// The copy cannot be approved a second time.
	copyPlan, err := b.desk.Plan(ctx, replay.Ref{ID: ids[1]}, "dave")
	require.NoError(t, err)
	require.Equal(t, preview.Refuse, copyPlan.Verdict.Action)
	require.Equal(t, "replay.already_replayed", copyPlan.Verdict.Code)
	_, err = b.desk.Approve(ctx, copyPlan.ReplayID, approval)
	require.ErrorIs(t, err, replay.ErrRefused)

	// Executed twice, and concurrently: one event.
	var wg sync.WaitGroup
	results := make([]replay.Execution, 8)
	for i := range results {
		wg.Go(func() {
			x, err := b.desk.Execute(ctx, plan.ReplayID, "carol")
			if err != nil {
				t.Errorf("execute: %v", err)
			}
			results[i] = x
		})
	}
	wg.Wait()
	sent := b.replays(t, settle.EventID)
	require.Len(t, sent, 1)
	fresh := 0
	for _, x := range results {
		require.Equal(t, sent[0].Envelope.EventID, x.ReplayEventID.String())
		if !x.AlreadyExecuted {
			fresh++
			require.EqualValues(t, 2, x.QuarantineReplayed, "the message and its copy")
		}
	}
	require.Equal(t, 1, fresh)

	// The settle stage's transaction, delivered the replay twice and the
	// original late: one ledger row.
	for _, ev := range []envelope.Envelope{sent[0].Envelope, sent[0].Envelope, settle} {
		_, err := inbox.Do(ctx, b.pool, catalog.GroupSettle.Name, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
			s, err := billing.Capture(ctx, tx, tk.ID)
			if err != nil || !s.Changed {
				return inbox.StaleNoop, err
			}
			return inbox.Applied, nil
		})
		require.NoError(t, err)
	}
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_ledger WHERE ledger_business_type = 'CAPTURE'`))

	// A later settle event for the task is now a stale no-op, and the
	// ledger key would refuse a second capture anyway.
	late := event(t, tk, catalog.EventSettleRequested, task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded})
	b.quarantine(t, deadLetter(t, catalog.GroupSettle, late))
	latePlan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(late.EventID)}, "alice")
	require.NoError(t, err)
	require.Equal(t, preview.StaleNoop, latePlan.Verdict.Action)
	require.Equal(t, "settle.settled", latePlan.Verdict.Code)
	require.Len(t, latePlan.Effects.Ledger, 1)
	require.Equal(t, billing.Captured, latePlan.Effects.Reservation.Status)
	_, err = b.pool.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, ledger_business_type, business_id, amount, balance_after)
		VALUES ($1, 'CAPTURE', $2, -40, 0)`, tk.TenantID, latePlan.Effects.Reservation.ReservationID.String())
	requireUnique(t, err, "credit_ledger_business_key")
}

func TestEveryStepIsAudited(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tk, submit := b.taskAt(t, b.tenant(t), task.Queued)
	b.quarantine(t, entry(t, catalog.GroupSubmit, submit, "provider.unavailable"))

	plan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(submit.EventID)}, "alice")
	require.NoError(t, err)
	require.Equal(t, preview.Act, plan.Verdict.Action)
	require.Equal(t, "submit.queued", plan.Verdict.Code)

	r, err := b.desk.Get(ctx, plan.ReplayID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusDryRun, r.Status)
	require.Equal(t, replay.NoTicket, r.Ticket)
	require.Equal(t, "alice", r.Operator)
	require.Equal(t, replay.DryRunReason, r.Reason)
	require.Nil(t, r.ApprovedAt)
	require.Len(t, r.Steps, 1)
	require.Equal(t, replay.StepPlanned, r.Steps[0].Step)
	require.Equal(t, string(task.Queued), r.Steps[0].TaskStatus)

	_, err = b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.ErrorIs(t, err, replay.ErrNotApproved)

	_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
	require.NoError(t, err)
	_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
	require.ErrorIs(t, err, replay.ErrDecided)

	// The task moved on between approval and execution: the replay still
	// goes (it is harmless), and the step says what it met.
	b.move(t, tk.ID, task.Submitting)
	x, err := b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.NoError(t, err)
	require.Equal(t, preview.StaleNoop, x.Verdict.Action)

	r, err = b.desk.Get(ctx, plan.ReplayID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusExecuted, r.Status)
	require.Equal(t, approval.Ticket, r.Ticket)
	require.Equal(t, approval.Operator, r.Operator)
	require.Equal(t, approval.Reason, r.Reason)
	require.Equal(t, uuid.MustParse(submit.EventID), r.OriginalEventID)
	require.Equal(t, x.ReplayEventID, *r.ReplayEventID)
	require.Equal(t, catalog.GenerationSubmit.Name, r.Topic)
	require.NotNil(t, r.ApprovedAt)
	require.NotNil(t, r.ExecutedAt)
	require.False(t, r.ExecutedAt.Before(*r.ApprovedAt))
	require.False(t, r.ApprovedAt.Before(r.CreatedAt))
	steps := make([]string, len(r.Steps))
	for i, s := range r.Steps {
		steps[i] = s.Step + "/" + s.Operator + "/" + string(s.Verdict.Action)
		require.False(t, s.At.IsZero())
	}
	require.Equal(t, []string{"planned/alice/ACT", "approved/bob/ACT", "executed/carol/STALE_NOOP"}, steps)
	require.Equal(t, approval.Ticket, r.Steps[1].Ticket)
	require.Equal(t, approval.Reason, r.Steps[1].Reason)
	require.Equal(t, string(task.Submitting), r.Steps[2].TaskStatus)
	require.Equal(t, x.ReplayEventID.String(), r.Steps[2].ReplayEventID)
	require.NotNil(t, r.Plan)
	require.Equal(t, preview.Act, r.Plan.Verdict.Action, "the plan as the dry run found it")

	// The quarantine view lists the replay.
	q, err := b.desk.Show(ctx, r.QuarantineID)
	require.NoError(t, err)
	require.Equal(t, quarantine.Replayed, q.Status)
	require.Len(t, q.Replays, 1)
	require.Equal(t, r.ReplayID, q.Replays[0].ReplayID)
}

func TestRefusalsAreAuditedAndFinal(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner, other := b.tenant(t), b.tenant(t)
	tk, _ := b.taskAt(t, owner, task.Queued)

	// An event naming another tenant than the task's owner.
	forged := event(t, tk, catalog.EventSubmitRequested, task.SubmitRequested{TaskID: tk.ID, Version: 1})
	forged.TenantID = other.String()
	b.quarantine(t, entry(t, catalog.GroupSubmit, forged, "security.tenant_mismatch"))
	plan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(forged.EventID)}, "alice")
	require.NoError(t, err)
	require.Equal(t, preview.Verdict{Action: preview.Refuse, Code: "security.tenant_mismatch", Reason: plan.Verdict.Reason}, plan.Verdict)

	rep, err := b.desk.Approve(ctx, plan.ReplayID, approval)
	require.ErrorIs(t, err, replay.ErrRefused)
	require.ErrorContains(t, err, "security.tenant_mismatch")
	require.Equal(t, replay.StatusRejected, rep.Status)
	r, err := b.desk.Get(ctx, plan.ReplayID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusRejected, r.Status)
	require.Equal(t, approval.Ticket, r.Ticket)
	require.Equal(t, []string{replay.StepPlanned, replay.StepRefused}, []string{r.Steps[0].Step, r.Steps[1].Step})
	_, err = b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.ErrorIs(t, err, replay.ErrRefused)
	require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_events WHERE producer = 'replay'`))

	// An unknown task, a payload that does not fit, an unreadable message.
	ghost := event(t, task.Task{ID: uuid.New(), TenantID: owner}, catalog.EventSubmitRequested, task.SubmitRequested{TaskID: uuid.New()})
	misfit := event(t, tk, catalog.EventSubmitRequested, map[string]any{"task_id": 42, "colour": "red"})
	garbage := entry(t, catalog.GroupSubmit, misfit, "not_cloudevent")
	garbage.EventID, garbage.Properties, garbage.Body = "", map[string]string{"x": "y"}, []byte{0xff, 0x00}
	// A group no stage of the build consumes, and an event its stage's
	// rule refuses whatever the task's state.
	render := event(t, tk, catalog.EventRenderRequested, map[string]any{"task_id": tk.ID})
	fetch := event(t, tk, catalog.EventFetchRequested, task.FetchRequested{TaskID: tk.ID})
	ids := b.quarantine(t, entry(t, catalog.GroupSubmit, ghost, "task.not_found"), entry(t, catalog.GroupSubmit, misfit, "payload.invalid"), garbage,
		entry(t, catalog.GroupRender, render, "x.y"), entry(t, catalog.GroupFetch, fetch, "x.y"))
	for i, want := range []string{"task.not_found", "payload.invalid", "envelope.unreadable", "replay.no_rule", "fetch.refused"} {
		p, err := b.desk.Plan(ctx, replay.Ref{ID: ids[i]}, "alice")
		require.NoError(t, err)
		require.Equal(t, preview.Refuse, p.Verdict.Action)
		require.Equal(t, want, p.Verdict.Code, p.Verdict.Reason)
	}
	// The message without an event id is recorded under the nil UUID.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM message_replays WHERE original_event_id = '00000000-0000-0000-0000-000000000000'`))

	// A verdict that turns into a refusal between approval and execution.
	_, submit := b.taskAt(t, owner, task.Queued)
	gone := b.quarantine(t, entry(t, catalog.GroupSubmit, submit, "provider.unavailable"))[0]
	p, err := b.desk.Plan(ctx, replay.Ref{ID: gone}, "alice")
	require.NoError(t, err)
	_, err = b.desk.Approve(ctx, p.ReplayID, approval)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `DELETE FROM message_quarantine WHERE quarantine_id = $1`, gone)
	require.NoError(t, err)
	_, err = b.desk.Execute(ctx, p.ReplayID, "carol")
	require.ErrorIs(t, err, replay.ErrRefused)
	r, err = b.desk.Get(ctx, p.ReplayID)
	require.NoError(t, err)
	require.Equal(t, replay.StatusRejected, r.Status)
	require.Equal(t, "quarantine.gone", r.Steps[len(r.Steps)-1].Verdict.Code)
	require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_events WHERE producer = 'replay'`))
}

func TestBulkDryRunCountsThenApprovesAndExecutesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner, other := b.tenant(t), b.tenant(t)
	_, queued := b.taskAt(t, owner, task.Queued)
	_, queued2 := b.taskAt(t, owner, task.Queued)
	_, running := b.taskAt(t, owner, task.ProviderRunning)
	tk, _ := b.taskAt(t, owner, task.Queued)
	forged := event(t, tk, catalog.EventSubmitRequested, task.SubmitRequested{TaskID: tk.ID})
	forged.TenantID = other.String()
	_, poisonSource := b.taskAt(t, owner, task.Queued)
	poison := entry(t, catalog.GroupSubmit, poisonSource, "not_cloudevent")
	poison.EventID, poison.Properties = "", map[string]string{}

	b.quarantine(t,
		deadLetter(t, catalog.GroupSubmit, queued),           // ACT
		reused(entry(t, catalog.GroupSubmit, queued, "x.y")), // its copy: counted once
		deadLetter(t, catalog.GroupSubmit, queued2),          // ACT
		deadLetter(t, catalog.GroupSubmit, running),          // STALE_NOOP
		deadLetter(t, catalog.GroupSubmit, forged),           // REFUSED
		poison, // REFUSED: no event
		deadLetter(t, catalog.GroupFetch, event(t, tk, catalog.EventFetchRequested, task.FetchRequested{TaskID: tk.ID})), // another group
	)
	f := quarantine.Filter{Consumer: catalog.GroupSubmit.Name}

	dry, err := b.desk.PlanBulk(ctx, f)
	require.NoError(t, err)
	require.Equal(t, 6, dry.Matched)
	require.Equal(t, 5, dry.Messages)
	require.Equal(t, 5, dry.Planned)
	require.Equal(t, map[preview.Action]int{preview.Act: 2, preview.StaleNoop: 1, preview.Refuse: 2}, dry.Counts)
	require.Zero(t, b.count(t, `SELECT count(*) FROM message_replays`), "a bulk dry run reads only")

	// Narrower filters.
	dlqOnly, err := b.desk.PlanBulk(ctx, quarantine.Filter{Consumer: f.Consumer, ErrorClass: "dlq"})
	require.NoError(t, err)
	require.Equal(t, 4, dlqOnly.Messages)
	future, err := b.desk.PlanBulk(ctx, quarantine.Filter{Consumer: f.Consumer, Since: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Zero(t, future.Messages)
	limited, err := b.desk.PlanBulk(ctx, quarantine.Filter{Consumer: f.Consumer, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, 5, limited.Messages)
	require.Equal(t, 2, limited.Planned)

	_, err = b.desk.ApproveBulk(ctx, f, approval, 4)
	require.ErrorIs(t, err, replay.ErrChanged)
	require.Zero(t, b.count(t, `SELECT count(*) FROM message_replays`))

	approved, err := b.desk.ApproveBulk(ctx, f, approval, dry.Messages)
	require.NoError(t, err)
	require.Equal(t, 3, approved.Approved)
	require.Equal(t, 2, approved.Rejected)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM message_replays WHERE ticket = $1 AND status = 'APPROVED'`, approval.Ticket))
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM message_replays WHERE ticket = $1 AND status = 'REJECTED'`, approval.Ticket))
	for _, it := range approved.Items {
		require.NotNil(t, it.ReplayID)
		r, err := b.desk.Get(ctx, *it.ReplayID)
		require.NoError(t, err)
		require.Equal(t, it.Status, string(r.Status))
		require.Equal(t, []string{approval.Ticket, approval.Operator, approval.Reason}, []string{r.Ticket, r.Operator, r.Reason})
		require.Equal(t, r.Status == replay.StatusApproved, r.ApprovedAt != nil)
		require.Len(t, r.Steps, 2, "planned and decided in one transaction")
		for _, s := range r.Steps {
			require.True(t, s.Bulk)
			require.Equal(t, approval.Operator, s.Operator)
		}
		require.Equal(t, replay.StepPlanned, r.Steps[0].Step)
		require.Equal(t, approval.Ticket, r.Steps[1].Ticket)
	}

	again, err := b.desk.ApproveBulk(ctx, f, approval, 0)
	require.NoError(t, err)
	require.Equal(t, 3, again.AlreadyApproved, "the same ticket's approvals are not recorded twice")

	x, err := b.desk.ExecuteBulk(ctx, replay.ExecuteBulkParams{Ticket: approval.Ticket, Operator: "carol"})
	require.NoError(t, err)
	require.Len(t, x.Executed, 3)
	require.Empty(t, x.Failed)
	require.Zero(t, x.AlreadyExecuted)
	for _, ev := range []envelope.Envelope{queued, queued2, running} {
		require.Len(t, b.replays(t, ev.EventID), 1)
	}
	require.Equal(t, 4, b.count(t, `SELECT count(*) FROM message_quarantine WHERE status = 'REPLAYED'`), "three events, one with a copy")

	x, err = b.desk.ExecuteBulk(ctx, replay.ExecuteBulkParams{Ticket: approval.Ticket, Operator: "carol"})
	require.NoError(t, err)
	require.Empty(t, x.Executed)
	require.Equal(t, 3, x.AlreadyExecuted)
	require.Equal(t, 3, b.count(t, `SELECT count(*) FROM outbox_events WHERE producer = 'replay'`))

	after, err := b.desk.PlanBulk(ctx, f)
	require.NoError(t, err)
	require.Equal(t, 2, after.Messages, "only the refused stay quarantined")
}

func TestShowAndResolve(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, submit := b.taskAt(t, b.tenant(t), task.Queued)
	ids := b.quarantine(t,
		entry(t, catalog.GroupSubmit, submit, "envelope.bad_id"),
		deadLetter(t, catalog.GroupFetch, submit), // the same event id in another group
	)

	q, err := b.desk.Show(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, "utf-8", q.BodyEncoding)
	require.JSONEq(t, string(submit.Payload), q.Body)
	require.Equal(t, submit.EventID, q.Properties["CE_id"])
	require.NotNil(t, q.Event)
	require.Equal(t, submit.EventID, q.Event.EventID)
	require.Empty(t, q.Replays)
	_, err = b.desk.Show(ctx, uuid.New())
	require.ErrorIs(t, err, replay.ErrNotFound)

	// An event id quarantined for two groups needs the group.
	_, err = b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(submit.EventID)}, "alice")
	require.ErrorIs(t, err, replay.ErrAmbiguous)
	require.ErrorContains(t, err, catalog.GroupFetch.Name)
	p, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(submit.EventID), Consumer: catalog.GroupFetch.Name}, "alice")
	require.NoError(t, err)
	require.Equal(t, ids[1], p.Message.QuarantineID)
	require.Equal(t, "event.type_not_handled", p.Verdict.Code)
	_, err = b.desk.Plan(ctx, replay.Ref{ID: uuid.New()}, "alice")
	require.ErrorIs(t, err, replay.ErrNotFound)

	// A structured-mode message reads as well.
	ev, err := submit.ToCloudEvent()
	require.NoError(t, err)
	ev.SetID(uuid.NewString())
	body, err := json.Marshal(ev)
	require.NoError(t, err)
	structured := entry(t, catalog.GroupSubmit, submit, "x.y")
	structured.EventID, structured.Properties, structured.Body = ev.ID(), map[string]string{"CE_datacontenttype": "application/cloudevents+json"}, body
	sid := b.quarantine(t, structured)[0]
	q, err = b.desk.Show(ctx, sid)
	require.NoError(t, err)
	require.NotNil(t, q.Event, q.EventError)
	require.Equal(t, ev.ID(), q.Event.EventID)
}

func TestInvalidRequestsAreRefusedWithTheirReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, tc := range []struct {
		d    replay.Decision
		want string
	}{
		{replay.Decision{Operator: "bob", Reason: "r"}, "ticket is required"},
		{replay.Decision{Ticket: "T", Reason: "r"}, "operator is required"},
		{replay.Decision{Ticket: "T", Operator: "bob", Reason: "  "}, "reason is required"},
		{replay.Decision{Ticket: "none", Operator: "bob", Reason: "r"}, `ticket "none"`},
		{replay.Decision{Ticket: "T\n", Operator: "bob", Reason: "r"}, "control characters"},
	} {
		_, err := b.desk.Approve(ctx, uuid.New(), tc.d)
		require.ErrorIs(t, err, replay.ErrInvalid)
		require.ErrorContains(t, err, tc.want)
	}
	_, err := b.desk.Approve(ctx, uuid.New(), approval)
	require.ErrorIs(t, err, replay.ErrNotFound)
	_, err = b.desk.Execute(ctx, uuid.New(), "carol")
	require.ErrorIs(t, err, replay.ErrNotFound)
	_, err = b.desk.Plan(ctx, replay.Ref{ID: uuid.New()}, "")
	require.ErrorIs(t, err, replay.ErrInvalid)

	for _, f := range []quarantine.Filter{
		{},
		{Consumer: "cg.nope"},
		{Consumer: catalog.GroupSubmit.Name, Limit: quarantine.MaxLimit + 1},
		{Consumer: catalog.GroupSubmit.Name, Status: quarantine.Replayed},
		{Consumer: catalog.GroupSubmit.Name, Since: time.Now(), Until: time.Now().Add(-time.Hour)},
		{Consumer: catalog.GroupSubmit.Name, ErrorCode: "a*b"},
	} {
		_, err := b.desk.PlanBulk(ctx, f)
		require.ErrorIs(t, err, replay.ErrInvalid, "%+v", f)
	}
}

// move applies transitions to a task as the stages would.
func (b *testBundle) move(t *testing.T, id uuid.UUID, to ...task.Status) {
	t.Helper()
	for _, s := range to {
		require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			cur, err := task.Get(t.Context(), tx, id)
			if err != nil {
				return err
			}
			_, err = task.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, task.Transition{To: s})
			return err
		}))
	}
}

// requireUnique fails unless err is a unique violation of constraint.
func requireUnique(t *testing.T, err error, constraint string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a unique violation, got %v", err)
	require.Equal(t, pgerrcode.UniqueViolation, pgErr.Code)
	require.Equal(t, constraint, pgErr.ConstraintName)
}
