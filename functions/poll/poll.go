// Package poll is the poll stage: it follows a PROVIDER_RUNNING task's
// remote job until it ends, from delayed generation.poll.due events and
// from verified provider callbacks.
//
// # Polls without a database write per poll
//
// A poll chain is one delayed event at a time. Each poll message carries
// the poll_at it was scheduled for, and the task's next_poll_at names the
// one live chain: a message whose poll_at differs is stale and does
// nothing, so a duplicate or a reconciler's extra poll cannot fork the
// chain. Moving to the next poll is an unversioned compare-and-set of
// next_poll_at plus the next delayed event; the task's version and timeline
// change only when the job ends. Progress between polls lives in Redis and
// reaches the task row by step or interval (package progress).
//
// Intervals grow with the job's age (a quarter of it, between
// POLL_FIRST_DELAY and POLL_MAX_INTERVAL), so a long job costs few
// messages; a callback usually ends the chain before that.
package poll

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// Name is the stage's name.
const Name = "poll"

// earlyTolerance is how much earlier than its poll_at a message may arrive
// and still count as due: broker timers are not exact.
const earlyTolerance = time.Second

// Params are what the stage needs.
type Params struct {
	Pool      *pgxpool.Pool
	Providers *provider.Set
	Redis     redis.UniversalClient // live progress; nil: none
	Slots     *slots.Limiter        // nil: no concurrency limits
	// Waitlist gets the slots a finished job releases, for its best
	// waiter; nil: they are released to whoever acquires first.
	Waitlist *waitlist.List
	Journey  config.Journey
	Timeout  time.Duration // bound of one provider call
	Logger   *slog.Logger
}

type poller struct{ Params }

// New returns the poll function: delayed polls and provider callbacks.
func New(p Params) *stage.Function {
	s := &poller{Params: p}
	return stage.Combine(stage.Params{Name: Name, Logger: p.Logger},
		stage.Typed[task.PollDue]{Group: catalog.GroupPoll, DB: p.Pool, Logger: p.Logger,
			Acts: func(t task.Task, due task.PollDue) bool { return task.PollActs(t, due.PollAt) },
			Work: s.poll},
		stage.Typed[task.CallbackReceived]{Group: catalog.GroupCallback, DB: p.Pool, Logger: p.Logger,
			TaskOf: func(env envelope.Envelope, _ task.CallbackReceived) (uuid.UUID, error) {
				id, err := uuid.Parse(env.AggregateID)
				if err != nil {
					return uuid.Nil, outcome.Permanentf("payload.invalid", "callback event aggregate_id %q is not a task id", env.AggregateID)
				}
				return id, nil
			},
			Acts: func(t task.Task, cb task.CallbackReceived) bool {
				return task.CallbackActs(t, cb.Provider, cb.ProviderJobID)
			},
			Work: s.callback})
}

// poll is one poll of the chain.
func (s *poller) poll(ctx context.Context, d stage.Delivery[task.PollDue]) error {
	t, due := d.Task, d.Payload
	if wait := time.Until(due.PollAt); wait > earlyTolerance {
		// Delivered early: put the same poll back at its time rather than
		// polling early or losing the chain.
		return s.reschedule(ctx, d, due.PollAt, due.Reason)
	}
	if t.CancelRequested {
		return cancelJob(ctx, s, d, due.AttemptID)
	}
	job, err := s.get(ctx, t)
	if stage.IsUncurable(err) {
		return d.Escalate(ctx, err, func(context.Context) { releaseSlots(s, d) })
	}
	return apply(ctx, s, d, due.AttemptID, job, err, func(at time.Time, reason string) error {
		return s.reschedule(ctx, d, at, reason)
	})
}

// callback applies a verified provider callback: the same path as a poll,
// without touching the poll chain.
func (s *poller) callback(ctx context.Context, d stage.Delivery[task.CallbackReceived]) error {
	t := d.Task
	// A callback names the job, not the attempt. Look the attempt up so
	// that the fetch it asks for carries the same payload a poll's does.
	a, err := attempt.OfJob(ctx, s.Pool, t.ID, t.ProviderJobID)
	if err != nil {
		return err
	}
	if t.CancelRequested {
		return cancelJob(ctx, s, d, a.ID)
	}
	// The callback only says something happened; the job's state is read
	// from the provider, which is the authority.
	job, err := s.get(ctx, t)
	if stage.IsUncurable(err) {
		return d.Escalate(ctx, err, func(context.Context) { releaseSlots(s, d) })
	}
	if err != nil || !job.Status.Terminal() {
		// Not over yet (or the provider is unreachable): the poll chain
		// carries on as scheduled.
		return d.Noop(ctx)
	}
	return apply(ctx, s, d, a.ID, job, nil, nil)
}

// checkIdentity refuses (refused non-nil) a job that carries another
// attempt's client request id than the attempt recorded with its job id:
// its state, output and cost are not this task's.
func (s *poller) checkIdentity(ctx context.Context, t task.Task, job provider.Job) (refused, err error) {
	a, err := attempt.OfJob(ctx, s.Pool, t.ID, t.ProviderJobID)
	if err != nil {
		return nil, err
	}
	return provider.CheckIdentity(t.Provider, provider.CheckedAtPoll, job, a.ClientRequestID), nil
}

// get asks t's provider for its job's state.
func (s *poller) get(ctx context.Context, t task.Task) (provider.Job, error) {
	c, err := stage.ProviderOf(s.Providers, t.Provider)
	if err != nil {
		return provider.Job{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return c.Get(ctx, t.ProviderJobID)
}

// releaseSlots frees the task's slots once the delivery's work committed.
func releaseSlots[T any](s *poller, d stage.Delivery[T]) {
	d.AfterCommit(func(ctx context.Context) {
		stage.ReleaseSlots(ctx, s.Slots, s.Waitlist, stage.GenerationSlots(d.Task, d.Task.Provider, s.Journey), d.Log)
	})
}

// apply records what the provider said about the job of attemptID. A job
// still running is polled again through next (nil for a callback: the
// chain carries on as scheduled).
func apply[T any](ctx context.Context, s *poller, d stage.Delivery[T], attemptID uuid.UUID, job provider.Job, getErr error,
	next func(at time.Time, reason string) error,
) error {
	t, o, log := d.Task, d.Origin, d.Log
	if getErr == nil {
		refused, err := s.checkIdentity(ctx, t, job)
		if err != nil {
			return err
		}
		if refused != nil {
			log.WarnContext(ctx, "provider job refused", slog.String("error", refused.Error()))
			return d.Escalate(ctx, stage.Uncurable("provider.identity_mismatch", refused), func(context.Context) { releaseSlots(s, d) })
		}
		s.recordProgress(ctx, log, t, job)
	}
	switch class := provider.ClassOf(getErr); {
	case getErr == nil && job.Status == provider.StatusSucceeded:
		return end(ctx, s, d, func(tx pgx.Tx, cur task.Task) error {
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Succeeded, "", ""); err != nil {
				return err
			}
			fetch, err := o.Emit(cur, task.FetchRequested{TaskID: cur.ID, AttemptID: attemptID})
			if err != nil {
				return err
			}
			_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Fetching, Reason: "provider job succeeded",
				Set: task.Fields{Progress: task.Ptr(100)}, Events: []outbox.Event{fetch}})
			return err
		})
	case getErr == nil && (job.Status == provider.StatusFailed || job.Status == provider.StatusCanceled):
		return end(ctx, s, d, func(tx pgx.Tx, cur task.Task) error {
			msg := "the provider's job " + string(job.Status)
			if job.ErrorMessage != "" {
				msg += ": " + job.ErrorMessage
			}
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Failed, job.ErrorCode, msg); err != nil {
				return err
			}
			if job.ContentRejected {
				// The provider's moderation stopped it: no retry, no other
				// provider (seed 7.10.3); the reservation is released.
				return task.Fail(ctx, tx, o, cur, provider.CodeContentRejected, "the provider "+cur.Provider+" refused the output or prompt for its content policy: "+msg)
			}
			return task.Fail(ctx, tx, o, cur, "provider.job_"+string(job.Status), msg)
		})
	case class == provider.ClassNotFound:
		return end(ctx, s, d, func(tx pgx.Tx, cur task.Task) error {
			msg := "the provider no longer knows job " + cur.ProviderJobID
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Failed, string(class), msg); err != nil {
				return err
			}
			return task.Fail(ctx, tx, o, cur, "provider.job_lost", msg)
		})
	}
	if next == nil {
		return d.Noop(ctx) // a callback for a job still running
	}
	now := time.Now()
	if t.DeadlineAt != nil && now.After(*t.DeadlineAt) {
		return end(ctx, s, d, func(tx pgx.Tx, cur task.Task) error {
			d.AfterCommit(func(ctx context.Context) {
				// The task is failed and refunded; stop the remote job too,
				// or it keeps running (and charging) for nothing. Best
				// effort: a job we cannot cancel ends on its own.
				c, err := stage.ProviderOf(s.Providers, t.Provider)
				if err != nil {
					log.WarnContext(ctx, "cancel of the timed-out provider job not sent", slog.String("error", err.Error()))
					return
				}
				ctx, cancel := context.WithTimeout(ctx, s.Timeout)
				defer cancel()
				if _, cerr := c.Cancel(ctx, t.ProviderJobID); cerr != nil {
					log.WarnContext(ctx, "cancel of the timed-out provider job failed", slog.String("provider_class", string(provider.ClassOf(cerr))))
				}
			})
			msg := fmt.Sprintf("the provider did not finish within GENERATION_MAX_WAIT (%s)", s.Journey.MaxWait)
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Failed, "max_wait", msg); err != nil {
				return err
			}
			return task.Fail(ctx, tx, o, cur, "provider.max_wait_exceeded", msg)
		})
	}
	reason := "provider job " + string(job.Status)
	if getErr != nil {
		reason = "poll failed: provider " + string(provider.ClassOf(getErr))
		log.WarnContext(ctx, "poll failed; polling again later", slog.String("provider_class", string(provider.ClassOf(getErr))), slog.String("error", getErr.Error()))
	}
	interval := min(max(now.Sub(t.UpdatedAt)/4, s.Journey.PollFirst), s.Journey.PollMax)
	interval = max(interval, provider.RetryAfterOf(getErr))
	if getErr == nil && job.Throttled {
		// The provider holds the job back for our account's concurrency
		// limit (Runway's THROTTLED), a 429 in all but name: asking again
		// soon learns nothing, so the wait doubles.
		interval = min(2*interval, s.Journey.PollMax)
		reason = "provider throttled the job (the account's concurrency limit)"
	}
	return next(now.Add(interval), reason)
}

// reschedule moves the chain to its next poll: compare-and-set of
// next_poll_at (no version bump) plus the next delayed event, which
// carries its wait (seed 7.12.1): the task still PROVIDER_RUNNING at the
// same version, due at, why, and the how-manieth poll it is.
func (s *poller) reschedule(ctx context.Context, d stage.Delivery[task.PollDue], at time.Time, reason string) error {
	t, due := d.Task, d.Payload
	at = at.UTC().Truncate(time.Microsecond)
	// The wait names the version as locked: a scanner's rescue may have
	// touched the task since it was read. The poll chain's own
	// compare-and-set says whether the event is stale.
	return d.Apply(ctx, task.Guard(), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		moved, err := task.MovePoll(ctx, tx, t.ID, due.PollAt, at)
		if err != nil || !moved {
			return aggregate.Stale, err
		}
		retry := due.RetryAttempt
		if at != due.PollAt {
			retry++ // an early delivery put back is the same poll
		}
		next, err := d.Origin.EmitAt(cur, task.PollDue{TaskID: t.ID, AttemptID: due.AttemptID, PollAt: at, Wait: task.Wait{
			ExpectedStatus: task.ProviderRunning, ExpectedVersion: cur.Version, NotBefore: at, Reason: reason, RetryAttempt: retry}}, at)
		if err != nil {
			return 0, err
		}
		return aggregate.Applied, outbox.Write(ctx, tx, next)
	})
}

// end applies a job's end in the inbox-protected transaction, then frees
// the task's slots.
func end[T any](ctx context.Context, s *poller, d stage.Delivery[T], fn func(tx pgx.Tx, cur task.Task) error) error {
	return d.Apply(ctx, runningJob(d.Task), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		releaseSlots(s, d)
		return aggregate.Applied, fn(tx, cur)
	})
}

// runningJob is the transition of an event about t's provider job: it
// holds while the task is PROVIDER_RUNNING with that job.
func runningJob(t task.Task) aggregate.Transition[task.Status, task.Task] {
	tr := task.Guard(task.ProviderRunning)
	tr.If = func(cur task.Task) bool { return cur.ProviderJobID == t.ProviderJobID }
	return tr
}
