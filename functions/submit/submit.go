// Package submit is the submit stage: it hands a QUEUED or WAITING_RETRY
// task to its provider exactly once.
//
// # How a submit stays single
//
// The attempt (task_attempts, with a stable provider idempotency key) is
// committed before the provider is called, and the call happens outside any
// transaction. A delivery that finds the task already SUBMITTING resumes
// that attempt with the same key instead of making a new one, so a crash
// between the call and the recording, a duplicate delivery, or a retry
// after a 429 all reach the same remote job. A send is counted with the
// task row locked and still the version the delivery read, so a delivery
// that read the task before another recorded its answer sends nothing. At
// a provider that does not dedup a resend by key (Replicate), an attempt
// with a send nobody answered is looked up, never sent again. The answer is
// recorded in the inbox-protected transaction:
//
//   - accepted: PROVIDER_RUNNING and the first delayed poll;
//   - 429 / unavailable / no free slot: WAITING_RETRY with next_retry_at and
//     a delayed resubmit (a business wait, not a failure), the same attempt
//     kept for the retry;
//   - rejected: FAILED, and the reservation released;
//   - refused for its content (content_rejected): FAILED, the reservation
//     released, and neither retried nor sent to another provider, which
//     would be getting around the provider's review (seed 7.10.3);
//   - answer lost (timeout) or unreadable: the attempt is SUBMIT_UNKNOWN, the task
//     RECONCILING, and a delayed task.reconcile.due looks for the job
//     before anything is submitted again.
//
// # Routing and failover
//
// A model has an ordered list of providers (PROVIDER_ROUTES). A new attempt
// goes to the first that can serve the request, whose circuit is not open
// and that has a free slot. A task keeps its open attempt, and so its
// provider, for as long as that attempt might have made a remote job:
// every send is counted before the call, and only a send refused outright
// (429, 503, never sent) counts as making nothing. When the attempt's
// provider is unavailable and every send it made was refused outright, or
// the reconciler's lookup confirmed its job absent, the attempt is
// ABANDONED and a new one goes to the next provider. A submit whose answer
// was lost is never moved without that lookup: two providers cannot both
// run, and charge for, one task.
package submit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// Name is the stage's name.
const Name = "submit"

// noSlotReason starts the timeline reason of a wait for a concurrency
// slot, and pausedReason that of a wait out of a pause.
const (
	noSlotReason = "no free slot: "
	pausedReason = "paused: "
)

// Params are what the stage needs.
type Params struct {
	Pool      *pgxpool.Pool
	Providers *provider.Set
	Slots     *slots.Limiter // nil: no concurrency limits
	// Waitlist is where a submit waits for a full slot scope, woken when a
	// slot frees; nil: the backoff timer alone (SCHED_WAITLIST=false).
	Waitlist *waitlist.List
	Journey  config.Journey
	// Timeout bounds one provider call; past it the answer counts as lost.
	Timeout time.Duration
	// CallbackURL is the named provider's callback URL; nil or "": poll only.
	CallbackURL func(provider string) string
	Logger      *slog.Logger
}

type submitter struct{ Params }

// New returns the submit function.
func New(p Params) *stage.Function {
	s := &submitter{Params: p}
	return stage.NewTyped(stage.Typed[task.SubmitRequested]{Group: catalog.GroupSubmit, DB: p.Pool, Logger: p.Logger, Work: s.work,
		// Whatever event it is (a delayed resubmit whose wait has ended, or
		// this one redelivered after a crash mid-submit): the open attempt
		// goes on.
		Resumes: task.SubmitResumes,
		Acts: func(t task.Task, _ task.SubmitRequested) bool {
			return task.SubmitResumes(t) || task.SubmitStarts(t, time.Now())
		}})
}

func (s *submitter) work(ctx context.Context, d stage.Delivery[task.SubmitRequested]) error {
	t, a, err := s.begin(ctx, d)
	if err != nil || a == nil {
		return err
	}
	job, callErr := s.call(ctx, t, *a)
	if stage.IsUncurable(callErr) {
		return d.Escalate(ctx, callErr, func(context.Context) { s.releaseSlots(d, a.Provider, true) })
	}
	if callErr == nil {
		if idErr := provider.CheckIdentity(a.Provider, provider.CheckedAtSubmit, job, a.ClientRequestID); idErr != nil {
			// Not this attempt's job: record nothing of it, and find this
			// attempt's own job (if any) the way a lost answer is found.
			d.Log.WarnContext(ctx, "provider answer refused", slog.String("error", idErr.Error()))
			callErr = &provider.Error{Class: provider.ClassMalformed, Message: "submit answer refused", Err: idErr}
		}
	}
	d.Log.InfoContext(ctx, "provider submit", slog.Int("attempt", a.No), slog.String("provider_class", string(provider.ClassOf(callErr))))
	return s.record(ctx, d, *a, job, callErr)
}

// begin takes the task to SUBMITTING with an attempt committed, or finds
// the attempt an earlier delivery committed. A nil attempt means the work
// is done without calling the provider (stale event, no provider free, or
// no provider able to serve the request).
func (s *submitter) begin(ctx context.Context, d stage.Delivery[task.SubmitRequested]) (task.Task, *attempt.Attempt, error) {
	t, req := d.Task, d.Payload
	for try := range 3 {
		if try > 0 {
			// Another delivery moved the task: look again.
			var err error
			if t, err = stage.ReadTask(ctx, s.Pool, d.Env, t.ID); err != nil {
				return task.Task{}, nil, err
			}
		}
		switch {
		case task.SubmitResumes(t):
			a, err := attempt.Latest(ctx, s.Pool, t.ID, attempt.Submitting)
			if errors.Is(err, attempt.ErrNotFound) {
				return t, nil, d.Noop(ctx)
			}
			if err != nil {
				return task.Task{}, nil, err
			}
			if a.Sends > a.RefusedSends && !s.resendSafe(a.Provider) {
				// A send went out and nothing recorded its answer (the
				// process died mid-call, or another delivery is in it): at
				// a provider that does not dedup by key, a resend could
				// start a second paid job. Look it up instead.
				return t, nil, s.unansweredSend(ctx, d, a)
			}
			// The send is counted with the task locked and still as read: a
			// task another delivery has moved meanwhile (its send refused,
			// the task now waiting) must not get a send whose answer
			// nothing would record.
			err = s.ifUnchanged(ctx, t, "", func(ctx context.Context, tx pgx.Tx, _ task.Task) error {
				return attempt.NoteSend(ctx, tx, a.ID)
			})
			switch {
			case errors.Is(err, task.ErrStale):
				continue
			case errors.Is(err, attempt.ErrNotFound):
				// Answered, or abandoned for another provider, since it
				// was read: nothing may be sent under it.
				return t, nil, d.Noop(ctx)
			case err != nil:
				return task.Task{}, nil, err
			}
			return t, &a, nil
		case !req.Holds(t), !task.SubmitStarts(t, time.Now()):
			// Not due, or a delayed resubmit of a wait that something
			// else ended.
			return t, nil, d.Noop(ctx)
		}
		// A WAITING_RETRY task keeps its attempt: the retry must reach the
		// same remote job if the refused call created one after all.
		open, err := attempt.Latest(ctx, s.Pool, t.ID, attempt.Submitting)
		var kept *attempt.Attempt
		if err == nil {
			kept = &open
		} else if !errors.Is(err, attempt.ErrNotFound) {
			return task.Task{}, nil, err
		}
		pick, why, err := s.route(ctx, t, kept)
		if stage.IsUncurable(err) {
			return t, nil, d.Escalate(ctx, err)
		}
		if err != nil {
			return task.Task{}, nil, err
		}
		switch {
		case pick.unfit != "":
			return t, nil, s.unroutable(ctx, d, pick.unfit)
		case pick.route == nil:
			return t, nil, s.wait(ctx, d, why, pick.floor, pick.wait)
		}
		// A kept attempt that may have made a job at a provider that does
		// not dedup a resend goes on with a lookup, not a send.
		lookUp := kept != nil && !kept.NoRemoteJob() && !s.resendSafe(kept.Provider)
		// The task is locked first, unchanged since it was read, so that
		// the attempt read above is still the task's, and two deliveries
		// never open attempts side by side.
		var (
			a        attempt.Attempt
			reserved *slots.Lease
		)
		err = s.ifUnchanged(ctx, t, task.Submitting, func(ctx context.Context, tx pgx.Tx, cur task.Task) (err error) {
			if a, err = s.open(ctx, tx, d, cur, kept, pick.route, why, lookUp); err != nil || cur.Status != task.WaitingRetry {
				return err
			}
			reserved, err = waitlist.Leave(ctx, tx, cur.ID, pick.route.Provider)
			return err
		})
		if err != nil {
			s.releaseIfElsewhere(ctx, d, pick.route.Provider)
		}
		if err == nil && reserved != nil {
			// The wake-up held this task a slot at a provider it did not
			// go to.
			stage.ReleaseLease(ctx, s.Slots, *reserved, d.Log)
		}
		if errors.Is(err, task.ErrStale) || errors.Is(err, attempt.ErrNotFound) {
			// The task, or the attempt it kept, moved under us.
			continue
		}
		if err != nil {
			return task.Task{}, nil, err
		}
		if kept != nil && kept.Provider != a.Provider {
			provider.CountFailover(kept.Provider, a.Provider)
			d.Log.InfoContext(ctx, "provider failover", slog.String("from", kept.Provider), slog.String("to", a.Provider), slog.String("why", why))
		}
		if lookUp {
			return t, nil, s.unansweredSend(ctx, d, a)
		}
		a.Sends++
		return t, &a, nil
	}
	return task.Task{}, nil, outcome.Retryable("task.contended", fmt.Errorf("task %s kept changing under the submit", t.ID))
}

// ifUnchanged runs act in one transaction on t's row, locked, while the
// task is still the version read, as a guarded transition to to ("" for a
// change in place); [task.ErrStale] when it is not.
func (s *submitter) ifUnchanged(ctx context.Context, t task.Task, to task.Status, act func(ctx context.Context, tx pgx.Tx, cur task.Task) error) error {
	tr := aggregate.Transition[task.Status, task.Task]{If: func(cur task.Task) bool { return cur.Version == t.Version }, To: to}
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		res, err := aggregate.Apply(ctx, tx, task.Kind, t.ID, tr, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
			return aggregate.Applied, act(ctx, tx, cur)
		})
		if err == nil && res == aggregate.Stale {
			return task.ErrStale
		}
		return err
	})
}

// open opens the attempt of a submit to route on cur, locked, or keeps
// kept when it stays with its provider; notes the send unless lookUp; and
// moves cur to SUBMITTING.
func (s *submitter) open(ctx context.Context, tx pgx.Tx, d stage.Delivery[task.SubmitRequested], cur task.Task, kept *attempt.Attempt,
	route *provider.Route, why string, lookUp bool,
) (attempt.Attempt, error) {
	a, reason := attempt.Attempt{}, ""
	switch {
	case kept != nil && route.Provider == kept.Provider:
		a = *kept
	default:
		if kept != nil {
			reason = fmt.Sprintf(" (failover from %s: %s)", kept.Provider, why)
			if err := attempt.Abandon(ctx, tx, kept.ID, "left for "+route.Provider+": "+why); err != nil {
				return a, err
			}
		}
		var err error
		if a, err = attempt.Open(ctx, tx, cur.ID, route.Provider, route.Model); err != nil {
			return a, err
		}
	}
	if !lookUp {
		if err := attempt.NoteSend(ctx, tx, a.ID); err != nil {
			return a, err
		}
	}
	_, err := task.Apply(ctx, tx, d.Origin, cur, task.Transition{To: task.Submitting,
		Reason: fmt.Sprintf("attempt %d at %s%s", a.No, a.Provider, reason),
		Set:    task.Fields{Provider: task.Ptr(a.Provider), ClearNextRetryAt: true}})
	return a, err
}

// unansweredSend hands attempt a, which made a send whose answer nothing
// recorded, to the lookup of a lost answer.
func (s *submitter) unansweredSend(ctx context.Context, d stage.Delivery[task.SubmitRequested], a attempt.Attempt) error {
	return s.record(ctx, d, a, provider.Job{}, &provider.Error{Class: provider.ClassTimeoutUnknown,
		Message: "an earlier send under this attempt has no recorded answer, and " + a.Provider + " does not dedup a resend"})
}

// beforeSubmitting runs fn in the inbox-protected transaction on the task
// locked, if it is still QUEUED or WAITING_RETRY (a stale no-op otherwise).
func (s *submitter) beforeSubmitting(ctx context.Context, d stage.Delivery[task.SubmitRequested],
	fn func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error),
) error {
	return d.Apply(ctx, task.Guard(task.Queued, task.WaitingRetry), fn)
}

// request is what the attempt asks its provider for.
func (s *submitter) request(t task.Task, a attempt.Attempt) provider.SubmitRequest {
	req := provider.SubmitRequest{
		IdempotencyKey: a.IdempotencyKey, ClientRequestID: a.ClientRequestID,
		Model: a.Model, Prompt: t.Prompt, DurationSeconds: t.DurationSeconds, Resolution: t.Resolution,
	}
	if req.Model == "" {
		req.Model = t.Model
	}
	if s.CallbackURL != nil && a.Provider != "" {
		req.CallbackURL = s.CallbackURL(a.Provider)
	}
	return req
}

func (s *submitter) call(ctx context.Context, t task.Task, a attempt.Attempt) (provider.Job, error) {
	c, err := s.Providers.Client(a.Provider)
	if err != nil {
		// An attempt of a provider this deployment no longer configures may
		// have a job there: no other provider may take it over blindly.
		return provider.Job{}, stage.Uncurable("provider.not_configured", err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	job, err := c.Submit(ctx, s.request(t, a))
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = &provider.Error{Class: provider.ClassTimeoutUnknown, Message: "no answer within " + s.Timeout.String(), Err: err}
	}
	return job, err
}

// releaseIfElsewhere frees the provider scope of the slots route took at
// providerName when the begin transaction did not commit and the task went
// to another provider meanwhile (another delivery, another replica's
// circuit). Only that scope: the tenant's and model's belong to the task
// (the same holder) wherever it runs.
func (s *submitter) releaseIfElsewhere(ctx context.Context, d stage.Delivery[task.SubmitRequested], providerName string) {
	if s.Slots == nil {
		return
	}
	cur, err := task.Get(ctx, s.Pool, d.Task.ID)
	if err != nil || cur.Provider == providerName {
		return
	}
	p := stage.GenerationSlots(cur, providerName, s.Journey)
	scope := "provider:" + providerName
	if err := s.Slots.Release(context.WithoutCancel(ctx), slots.Lease{Holder: p.Holder, Scopes: []string{scope}, TTL: p.TTL}); err != nil {
		d.Log.WarnContext(ctx, "release of a provider slot not used failed; it frees itself when the lease ends", slog.String("error", err.Error()))
	}
}

// resendSafe reports whether the named provider dedups a resend by key.
func (s *submitter) resendSafe(name string) bool {
	c, err := s.Providers.Client(name)
	return err == nil && provider.ResendSafe(c)
}

// releaseSlots frees the task's slots held for providerName: once the
// delivery's work committed, or now (the work that held them failed, or
// committed elsewhere already).
func (s *submitter) releaseSlots(d stage.Delivery[task.SubmitRequested], providerName string, now bool) {
	release := func(ctx context.Context) {
		stage.ReleaseSlots(ctx, s.Slots, s.Waitlist, stage.GenerationSlots(d.Task, providerName, s.Journey), d.Log)
	}
	if now {
		release(context.Background())
		return
	}
	d.AfterCommit(release)
}
