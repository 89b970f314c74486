package submit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// This file holds what a submit records of the provider's answer: a job
// to poll, a refusal to wait out, or a send whose fate is unknown.

// record stores the provider's answer in the inbox-protected transaction.
// An answer that ends the provider's part (refused, rejected) frees the
// task's slots after the commit.
func (s *submitter) record(ctx context.Context, d stage.Delivery[task.SubmitRequested], a attempt.Attempt, job provider.Job, callErr error) error {
	o := d.Origin
	// Another delivery may have taken this send for lost while it ran
	// (the task RECONCILING); a job in its answer came after all: the
	// lookup's work is done.
	late := callErr == nil && job.ID != ""
	tr := aggregate.Transition[task.Status, task.Task]{If: func(t task.Task) bool {
		return t.Status == task.Submitting || late && t.Status == task.Reconciling
	}}
	err := d.Apply(ctx, tr, func(ctx context.Context, tx pgx.Tx, t task.Task) (aggregate.Result, error) {
		if t.Status == task.Reconciling {
			return s.lateAnswer(ctx, tx, o, t, a, job)
		}
		now := time.Now()
		class := provider.ClassOf(callErr)
		switch class {
		case "":
			if job.ID == "" {
				return 0, outcome.Retryable("provider.malformed", errors.New("provider accepted the submit without a job id"))
			}
			if err := attempt.Answer(ctx, tx, a.ID, attempt.Accepted, job.ID, "", ""); err != nil {
				return 0, err
			}
			pollAt := now.Add(firstPoll(s.Journey, job)).UTC().Truncate(time.Microsecond)
			poll, err := o.EmitAt(t, task.PollDue{TaskID: t.ID, AttemptID: a.ID, PollAt: pollAt, Wait: task.Wait{
				ExpectedStatus: task.ProviderRunning, ExpectedVersion: t.Version + 1, NotBefore: pollAt, Reason: "provider accepted"}}, pollAt)
			if err != nil {
				return 0, err
			}
			_, err = task.Apply(ctx, tx, o, t, task.Transition{To: task.ProviderRunning, Reason: "provider accepted",
				Set:    task.Fields{ProviderJobID: task.Ptr(job.ID), NextPollAt: &pollAt, DeadlineAt: task.Ptr(now.Add(s.Journey.MaxWait))},
				Events: []outbox.Event{poll}})
			return aggregate.Applied, err
		case provider.ClassRateLimited, provider.ClassUnavailable:
			if !provider.RefusedOutright(callErr) && !s.resendSafe(a.Provider) {
				// The provider may have made the job before failing, and a
				// resend would not find it: look it up instead.
				return s.lost(ctx, tx, o, t, a, class, callErr)
			}
			s.releaseSlots(d, a.Provider, false)
			if err := attempt.NoteRefusal(ctx, tx, a.ID, string(class), callErr.Error(), provider.RefusedOutright(callErr)); err != nil {
				return 0, err
			}
			return s.waitTx(ctx, tx, o, t, d.Payload, "provider "+a.Provider+" "+string(class), provider.RetryAfterOf(callErr))
		case provider.ClassTimeoutUnknown, provider.ClassMalformed:
			// An answer we cannot read may still mean a job was created:
			// look it up before anything is submitted again.
			return s.lost(ctx, tx, o, t, a, class, callErr)
		case provider.ClassContentRejected:
			s.releaseSlots(d, a.Provider, false)
			if err := attempt.Answer(ctx, tx, a.ID, attempt.Rejected, "", string(class), callErr.Error()); err != nil {
				return 0, err
			}
			return aggregate.Applied, task.Fail(ctx, tx, o, t, provider.CodeContentRejected,
				"the provider "+a.Provider+" refused the request for its content policy: "+callErr.Error())
		default: // rejected, not found: the provider will not run this request
			s.releaseSlots(d, a.Provider, false)
			if err := attempt.Answer(ctx, tx, a.ID, attempt.Rejected, "", string(class), callErr.Error()); err != nil {
				return 0, err
			}
			return aggregate.Applied, task.Fail(ctx, tx, o, t, "provider.rejected", "the provider refused the request: "+callErr.Error())
		}
	})
	if stage.IsUncurable(err) {
		// A job id another attempt already holds, say: the same answer
		// would be refused on every delivery.
		return d.Escalate(ctx, err, func(context.Context) { s.releaseSlots(d, a.Provider, true) })
	}
	return err
}

// lateAnswer records the job of a send another delivery had declared lost
// (the task RECONCILING, the attempt SUBMIT_UNKNOWN), as the reconciler
// does when its lookup finds it: at a provider without lookups (Runway) it
// is the only way to learn the job.
// firstPoll is how long after the submit's answer the job is first polled:
// at once when the answer already reports it finished (a provider that
// answers from a cache, or a job faster than the call), since its slots are
// held until the poll ends it; POLL_FIRST_DELAY otherwise.
func firstPoll(j config.Journey, job provider.Job) time.Duration {
	if job.Status.Terminal() {
		return 0
	}
	return j.PollFirst
}

func (s *submitter) lateAnswer(ctx context.Context, tx pgx.Tx, o task.Origin, t task.Task, a attempt.Attempt, job provider.Job) (aggregate.Result, error) {
	cur, err := attempt.Get(ctx, tx, t.ID, a.ID)
	if err != nil || cur.Status != attempt.SubmitUnknown {
		return aggregate.Stale, err
	}
	if err := attempt.Found(ctx, tx, a.ID, job.ID); err != nil {
		return 0, err
	}
	now := time.Now()
	pollAt := now.Add(firstPoll(s.Journey, job)).UTC().Truncate(time.Microsecond)
	poll, err := o.EmitAt(t, task.PollDue{TaskID: t.ID, AttemptID: a.ID, PollAt: pollAt, Wait: task.Wait{
		ExpectedStatus: task.ProviderRunning, ExpectedVersion: t.Version + 1, NotBefore: pollAt, Reason: "late submit answer"}}, pollAt)
	if err != nil {
		return 0, err
	}
	_, err = task.Apply(ctx, tx, o, t, task.Transition{To: task.ProviderRunning, Reason: "the submit's answer came after it was taken for lost",
		Set:    task.Fields{ProviderJobID: task.Ptr(job.ID), NextPollAt: &pollAt, DeadlineAt: task.Ptr(now.Add(s.Journey.MaxWait))},
		Events: []outbox.Event{poll}})
	return aggregate.Applied, err
}

// lost records a submit whose outcome is unknown: the attempt
// SUBMIT_UNKNOWN, the task RECONCILING, and a delayed lookup.
func (s *submitter) lost(ctx context.Context, tx pgx.Tx, o task.Origin, t task.Task, a attempt.Attempt, class provider.Class, callErr error) (aggregate.Result, error) {
	if err := attempt.Answer(ctx, tx, a.ID, attempt.SubmitUnknown, "", string(class), callErr.Error()); err != nil {
		return 0, err
	}
	at := time.Now().Add(s.Journey.ReconcileAfter).UTC().Truncate(time.Microsecond)
	due, err := o.EmitAt(t, task.ReconcileDue{TaskID: t.ID, AttemptID: a.ID, Wait: task.Wait{
		ExpectedStatus: task.Reconciling, ExpectedVersion: t.Version + 1, NotBefore: at, Reason: "submit answer lost"}}, at)
	if err != nil {
		return 0, err
	}
	_, err = task.Apply(ctx, tx, o, t, task.Transition{To: task.Reconciling, Reason: "submit answer lost", Events: []outbox.Event{due}})
	return aggregate.Applied, err
}

// wait records a business wait outside any other work: WAITING_RETRY and a
// delayed resubmit, in the inbox-protected transaction.
// A wait for a full slot scope joins the wait list too, when there is
// one: the slot's release wakes the task, and the delayed resubmit is only
// the fallback, due after SCHED_WAIT_FALLBACK.
func (s *submitter) wait(ctx context.Context, d stage.Delivery[task.SubmitRequested], reason string, floor time.Duration, slot *waitlist.Wait) error {
	return s.beforeSubmitting(ctx, d, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		switch {
		case s.Waitlist != nil && slot != nil:
			w := *slot
			w.Reason, w.Refusals = reason, d.Payload.Refusals
			if err := s.Waitlist.Join(ctx, tx, cur, w); err != nil {
				return 0, err
			}
			floor = max(floor, s.Journey.WaitFallback)
			// A slot released between the refusal and this commit found no
			// waiter to hand it to: look once more, now that this one
			// waits.
			d.AfterCommit(func(ctx context.Context) { s.wakeIdle(ctx, d, w.Scope) })
		case s.Waitlist != nil:
			// Woken, and now waiting for something else: the slots the
			// wake-up took go to the next waiter.
			held, err := waitlist.Drop(ctx, tx, cur.ID)
			if err != nil {
				return 0, err
			}
			if held != "" {
				s.releaseSlots(d, held, false)
			}
		}
		return s.waitTx(ctx, tx, d.Origin, cur, d.Payload, reason, floor)
	})
}

// wakeIdle hands room in scope to its best waiter, after a wait committed.
func (s *submitter) wakeIdle(ctx context.Context, d stage.Delivery[task.SubmitRequested], scope string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if _, err := s.Waitlist.WakeIdle(ctx, scope, nil); err != nil {
		d.Log.WarnContext(ctx, "wake-up after joining the wait list failed; the reconciler repairs it", slog.String("error", err.Error()))
	}
}

func (s *submitter) waitTx(ctx context.Context, tx pgx.Tx, o task.Origin, t task.Task, req task.SubmitRequested, reason string, floor time.Duration) (aggregate.Result, error) {
	// Waiting for a free slot is the pipeline pacing itself, not the
	// provider refusing: only refusals count against SUBMIT_MAX_RETRIES.
	// Both grow the backoff. The counts travel in the delayed resubmit
	// (seed 7.12.1); a resubmit that is no wait (the API's, a
	// reconciler's) starts them again.
	retries, refusals := req.RetryAttempt, req.Refusals
	refusal := !strings.HasPrefix(reason, noSlotReason) && !strings.HasPrefix(reason, pausedReason)
	if refusal && refusals >= s.Journey.MaxRetries {
		return aggregate.Applied, task.Fail(ctx, tx, o, t, "submit.retries_exhausted",
			fmt.Sprintf("gave up after the provider refused %d submits; last reason: %s", refusals, reason))
	}
	if refusal {
		refusals++
	}
	at := time.Now().Add(stage.Backoff(min(retries, 16), s.Journey.RetryBase, s.Journey.RetryMax, floor, rand.Float64())).UTC().Truncate(time.Microsecond)
	next := task.SubmitRequested{TaskID: t.ID, Version: t.Version + 1, Refusals: refusals, Wait: task.Wait{
		ExpectedStatus: task.WaitingRetry, ExpectedVersion: t.Version + 1, NotBefore: at, Reason: reason, RetryAttempt: retries + 1}}
	resubmit, err := o.EmitAt(t, next, at)
	if err != nil {
		return 0, err
	}
	_, err = task.Apply(ctx, tx, o, t, task.Transition{To: task.WaitingRetry, Reason: reason,
		Set: task.Fields{NextRetryAt: &at}, Events: []outbox.Event{resubmit}})
	return aggregate.Applied, err
}
