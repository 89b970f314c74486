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
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "submit"

// noSlotReason starts the timeline reason of a wait for a concurrency slot.
const noSlotReason = "no free slot: "

// Params are what the stage needs.
type Params struct {
	Pool      *pgxpool.Pool
	Providers *provider.Set
	Slots     *slots.Limiter // nil: no concurrency limits
	Journey   config.Journey
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
			err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
				// The send is counted with the task locked and still as
				// read: a task another delivery has moved meanwhile (its
				// send refused, the task now waiting) must not get a send
				// whose answer nothing would record.
				if err := lockUnchanged(ctx, tx, t); err != nil {
					return err
				}
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
			return t, nil, s.wait(ctx, d, why, pick.floor)
		}
		// A kept attempt that may have made a job at a provider that does
		// not dedup a resend goes on with a lookup, not a send.
		lookUp := kept != nil && !kept.NoRemoteJob() && !s.resendSafe(kept.Provider)
		var a attempt.Attempt
		err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			// Locked first, so that the attempt read above is still the
			// task's, and two deliveries never open attempts side by side.
			if err := lockUnchanged(ctx, tx, t); err != nil {
				return err
			}
			reason := ""
			switch {
			case kept != nil && pick.route.Provider == kept.Provider:
				a = *kept
			default:
				if kept != nil {
					reason = fmt.Sprintf(" (failover from %s: %s)", kept.Provider, why)
					if err := attempt.Abandon(ctx, tx, kept.ID, "left for "+pick.route.Provider+": "+why); err != nil {
						return err
					}
				}
				if a, err = attempt.Open(ctx, tx, t.ID, pick.route.Provider, pick.route.Model); err != nil {
					return err
				}
			}
			if !lookUp {
				if err := attempt.NoteSend(ctx, tx, a.ID); err != nil {
					return err
				}
			}
			_, err := task.Apply(ctx, tx, d.Origin, t, task.Transition{To: task.Submitting,
				Reason: fmt.Sprintf("attempt %d at %s%s", a.No, a.Provider, reason),
				Set:    task.Fields{Provider: task.Ptr(a.Provider), ClearNextRetryAt: true}})
			return err
		})
		if err != nil {
			s.releaseIfElsewhere(ctx, d, pick.route.Provider)
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

// lockUnchanged locks t's row in tx, or returns [task.ErrStale] when the
// task is no longer the version read.
func lockUnchanged(ctx context.Context, tx pgx.Tx, t task.Task) error {
	cur, err := task.Lock(ctx, tx, t.ID)
	if err != nil {
		return err
	}
	if cur.Version != t.Version {
		return task.ErrStale
	}
	return nil
}

// unansweredSend hands attempt a, which made a send whose answer nothing
// recorded, to the lookup of a lost answer.
func (s *submitter) unansweredSend(ctx context.Context, d stage.Delivery[task.SubmitRequested], a attempt.Attempt) error {
	return s.record(ctx, d, a, provider.Job{}, &provider.Error{Class: provider.ClassTimeoutUnknown,
		Message: "an earlier send under this attempt has no recorded answer, and " + a.Provider + " does not dedup a resend"})
}

// pick is where a submit goes: a route whose slots are held, or none with
// the floor of the wait, or unfit saying why no provider can serve it.
type pick struct {
	route *provider.Route
	floor time.Duration
	unfit string
}

// route chooses the provider of the submit and takes its slots. kept is
// the task's open attempt, if any: it stays with its provider unless that
// provider is unavailable and the attempt is known to have made no remote
// job. why says why the submit waits, or why kept was left.
func (s *submitter) route(ctx context.Context, t task.Task, kept *attempt.Attempt) (pick, string, error) {
	var reasons []string
	slotWait := false
	var floor time.Duration
	try := func(r provider.Route, c provider.Client) (bool, error) {
		// A half-open circuit's one trial call is claimed here, so that
		// the submits routed meanwhile go elsewhere instead of being
		// refused there.
		unclaim, ok := provider.ClaimTrial(c)
		if !ok {
			reasons = append(reasons, r.Provider+": circuit open")
			floor = max(floor, provider.BreakerPause(c))
			return false, nil
		}
		if s.Slots == nil {
			return true, nil
		}
		_, err := s.Slots.Acquire(ctx, stage.GenerationSlots(t, r.Provider, s.Journey))
		if errors.Is(err, slots.ErrNoSlot) {
			unclaim()
			slotWait = true
			reasons = append(reasons, r.Provider+": "+err.Error())
			return false, nil
		}
		if err != nil {
			unclaim()
			return false, fmt.Errorf("acquire slots: %w", err)
		}
		return true, nil
	}
	reason := func() string {
		prefix := "no provider available: "
		if slotWait {
			// Waiting for a free slot is the pipeline pacing itself, not
			// a refusal (see waitTx).
			prefix = noSlotReason
		}
		return prefix + strings.Join(reasons, "; ")
	}
	keptTried := false
	if kept != nil {
		c, err := s.Providers.Client(kept.Provider)
		switch {
		case err != nil && !kept.NoRemoteJob():
			// Its job may exist at a provider this process cannot call:
			// no other may take the task over, and waiting will not help.
			return pick{}, "", stage.Uncurable("provider.not_configured", err)
		case err != nil:
			reasons = append(reasons, err.Error())
		case !kept.NoRemoteJob() || provider.BreakerState(c) == "closed":
			// An attempt that may have a job stays with its provider; one
			// that has none stays while its provider is healthy, and is
			// otherwise one candidate among the route's (a half-open
			// circuit's trial should not hold it while another provider
			// is closed).
			keptTried = true
			ok, err := try(provider.Route{Provider: kept.Provider, Model: kept.Model}, c)
			if err != nil || ok {
				return pick{route: &provider.Route{Provider: kept.Provider, Model: kept.Model}}, "", err
			}
		}
		if !kept.NoRemoteJob() {
			// It may have a job at its provider: only that provider may
			// go on with it, with the same key.
			return pick{floor: floor}, reason(), nil
		}
	}
	cands, unfit := s.Providers.Candidates(t.Model, s.request(t, attempt.Attempt{}))
	if kept != nil && !keptTried {
		// The attempt's provider refused it and is not healthy yet: its
		// trial call is for a task that has not been refused, and this one
		// goes to a closed provider first.
		cands = lastly(cands, kept.Provider)
	}
	for _, c := range cands {
		if keptTried && c.Provider == kept.Provider {
			continue
		}
		if kept != nil && c.Provider == kept.Provider {
			// Its own provider again: the attempt goes on, with its model.
			c.Model = kept.Model
		}
		ok, err := try(c.Route, c.Client)
		if err != nil {
			return pick{}, "", err
		}
		if ok {
			return pick{route: &c.Route}, reason(), nil
		}
	}
	if len(cands) == 0 && kept == nil {
		if len(unfit) == 0 {
			unfit = []string{"PROVIDER_ROUTES names no provider for model " + t.Model}
		}
		return pick{unfit: strings.Join(unfit, "; ")}, "", nil
	}
	return pick{floor: floor}, reason(), nil
}

// lastly moves provider's candidates behind the others, in order.
func lastly(cands []provider.Candidate, name string) []provider.Candidate {
	out := make([]provider.Candidate, 0, len(cands))
	var later []provider.Candidate
	for _, c := range cands {
		if c.Provider == name {
			later = append(later, c)
			continue
		}
		out = append(out, c)
	}
	return append(out, later...)
}

// unroutable fails a task no configured provider can serve: retrying
// cannot help until the request or the configuration changes.
func (s *submitter) unroutable(ctx context.Context, d stage.Delivery[task.SubmitRequested], why string) error {
	return s.beforeSubmitting(ctx, d, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		return aggregate.Applied, task.Fail(ctx, tx, d.Origin, cur, "provider.unsupported_request", "no configured provider can serve this request: "+why)
	})
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
		stage.ReleaseSlots(ctx, s.Slots, stage.GenerationSlots(d.Task, providerName, s.Journey), d.Log)
	}
	if now {
		release(context.Background())
		return
	}
	d.AfterCommit(release)
}

// wait records a business wait outside any other work: WAITING_RETRY and a
// delayed resubmit, in the inbox-protected transaction.
func (s *submitter) wait(ctx context.Context, d stage.Delivery[task.SubmitRequested], reason string, floor time.Duration) error {
	return s.beforeSubmitting(ctx, d, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		return s.waitTx(ctx, tx, d.Origin, cur, d.Payload, reason, floor)
	})
}
func (s *submitter) waitTx(ctx context.Context, tx pgx.Tx, o task.Origin, t task.Task, req task.SubmitRequested, reason string, floor time.Duration) (aggregate.Result, error) {
	// Waiting for a free slot is the pipeline pacing itself, not the
	// provider refusing: only refusals count against SUBMIT_MAX_RETRIES.
	// Both grow the backoff. The counts travel in the delayed resubmit
	// (seed 7.12.1); a resubmit that is no wait (the API's, a
	// reconciler's) starts them again.
	retries, refusals := req.RetryAttempt, req.Refusals
	refusal := !strings.HasPrefix(reason, noSlotReason)
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
