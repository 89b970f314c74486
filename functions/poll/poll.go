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
// change only when the job ends. Progress between polls lives in Redis.
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
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "poll"

// earlyTolerance is how much earlier than its poll_at a message may arrive
// and still count as due: broker timers are not exact.
const earlyTolerance = time.Second

// Params are what the stage needs.
type Params struct {
	Pool     *pgxpool.Pool
	Provider provider.Client
	Redis    redis.UniversalClient // live progress; nil: none
	Slots    *slots.Limiter        // nil: no concurrency limits
	Journey  config.Journey
	Timeout  time.Duration // bound of one provider call
	Logger   *slog.Logger
}

type poller struct{ Params }

// New returns the poll function.
func New(p Params) *stage.Function {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	s := &poller{Params: p}
	return stage.New(stage.Params{Name: Name, EventTypes: []string{catalog.EventPollDue, catalog.EventCallbackReceived}, Work: s.work, Logger: p.Logger})
}

func (s *poller) work(ctx context.Context, ev envelope.Envelope) error {
	if ev.EventType == catalog.EventCallbackReceived {
		return s.callback(ctx, ev)
	}
	due, err := stage.Decode[task.PollDue](ev)
	if err != nil {
		return err
	}
	consumer := catalog.GroupPoll.Name
	t, err := stage.ReadTask(ctx, s.Pool, ev, due.TaskID)
	if err != nil {
		return err
	}
	if !task.PollActs(t, due.PollAt) {
		return stage.Noop(ctx, s.Pool, consumer, ev)
	}
	if wait := time.Until(due.PollAt); wait > earlyTolerance {
		// Delivered early: put the same poll back at its time rather than
		// polling early or losing the chain.
		return s.reschedule(ctx, ev, consumer, t, due, due.PollAt)
	}
	if t.CancelRequested {
		return s.cancelJob(ctx, ev, consumer, t, due.AttemptID)
	}
	job, err := s.get(ctx, t.ProviderJobID)
	return s.apply(ctx, ev, consumer, t, due, job, err)
}

// callback applies a verified provider callback: the same path as a poll,
// without touching the poll chain.
func (s *poller) callback(ctx context.Context, ev envelope.Envelope) error {
	cb, err := stage.Decode[task.CallbackReceived](ev)
	if err != nil {
		return err
	}
	consumer := catalog.GroupCallback.Name
	taskID, err := uuid.Parse(ev.AggregateID)
	if err != nil {
		return outcome.Permanentf("payload.invalid", "callback event aggregate_id %q is not a task id", ev.AggregateID)
	}
	t, err := stage.ReadTask(ctx, s.Pool, ev, taskID)
	if err != nil {
		return err
	}
	if !task.CallbackActs(t, cb.Provider, cb.ProviderJobID) {
		return stage.Noop(ctx, s.Pool, consumer, ev)
	}
	// A callback names the job, not the attempt. Look the attempt up so
	// that the fetch it asks for carries the same payload a poll's does:
	// without this its attempt_id was the zero UUID.
	a, err := attempt.OfJob(ctx, s.Pool, t.ID, t.ProviderJobID)
	if err != nil {
		return err
	}
	attemptID := a.ID
	if t.CancelRequested {
		return s.cancelJob(ctx, ev, consumer, t, attemptID)
	}
	// The callback only says something happened; the job's state is read
	// from the provider, which is the authority.
	job, err := s.get(ctx, t.ProviderJobID)
	if err != nil || !job.Status.Terminal() {
		// Not over yet (or the provider is unreachable): the poll chain
		// carries on as scheduled.
		return stage.Noop(ctx, s.Pool, consumer, ev)
	}
	return s.apply(ctx, ev, consumer, t, task.PollDue{TaskID: t.ID, AttemptID: attemptID}, job, nil)
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

func (s *poller) get(ctx context.Context, jobID string) (provider.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return s.Provider.Get(ctx, jobID)
}

// apply records what the provider said. due.PollAt is zero for callbacks.
func (s *poller) apply(ctx context.Context, ev envelope.Envelope, consumer string, t task.Task, due task.PollDue, job provider.Job, getErr error) error {
	o := task.FromEnvelope(Name, ev)
	log := s.Logger.With(slog.String("task_id", t.ID.String()), slog.String("event_id", ev.EventID))
	if getErr == nil {
		refused, err := s.checkIdentity(ctx, t, job)
		if err != nil {
			return err
		}
		if refused != nil {
			log.WarnContext(ctx, "provider job refused", slog.String("error", refused.Error()))
			err := stage.Escalate(ctx, s.Pool, consumer, ev, o, t.ID, stage.Uncurable("provider.identity_mismatch", refused), log)
			if err == nil {
				stage.ReleaseSlots(ctx, s.Slots, stage.GenerationSlots(t, t.Provider, s.Journey), log)
			}
			return err
		}
	}
	switch class := provider.ClassOf(getErr); {
	case getErr == nil && job.Status == provider.StatusSucceeded:
		return s.end(ctx, ev, consumer, t, log, func(tx pgx.Tx, cur task.Task) error {
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Succeeded, "", ""); err != nil {
				return err
			}
			fetch, err := o.Emit(cur, task.FetchRequested{TaskID: cur.ID, AttemptID: due.AttemptID})
			if err != nil {
				return err
			}
			_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Fetching, Reason: "provider job succeeded",
				Set: task.Fields{Progress: task.Ptr(100)}, Events: []outbox.Event{fetch}})
			return err
		})
	case getErr == nil && (job.Status == provider.StatusFailed || job.Status == provider.StatusCanceled):
		return s.end(ctx, ev, consumer, t, log, func(tx pgx.Tx, cur task.Task) error {
			msg := "the provider's job " + string(job.Status)
			if job.ErrorMessage != "" {
				msg += ": " + job.ErrorMessage
			}
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Failed, job.ErrorCode, msg); err != nil {
				return err
			}
			return task.Fail(ctx, tx, o, cur, "provider.job_"+string(job.Status), msg)
		})
	case class == provider.ClassNotFound:
		return s.end(ctx, ev, consumer, t, log, func(tx pgx.Tx, cur task.Task) error {
			msg := "the provider no longer knows job " + cur.ProviderJobID
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Failed, string(class), msg); err != nil {
				return err
			}
			return task.Fail(ctx, tx, o, cur, "provider.job_lost", msg)
		})
	}
	if due.PollAt.IsZero() {
		return stage.Noop(ctx, s.Pool, consumer, ev) // a callback for a job still running
	}
	now := time.Now()
	if t.DeadlineAt != nil && now.After(*t.DeadlineAt) {
		err := s.end(ctx, ev, consumer, t, log, func(tx pgx.Tx, cur task.Task) error {
			msg := fmt.Sprintf("the provider did not finish within GENERATION_MAX_WAIT (%s)", s.Journey.MaxWait)
			if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Failed, "max_wait", msg); err != nil {
				return err
			}
			return task.Fail(ctx, tx, o, cur, "provider.max_wait_exceeded", msg)
		})
		if err == nil {
			// The task is failed and refunded; stop the remote job too, or
			// it keeps running (and charging) for nothing. Best effort: a
			// job we cannot cancel ends on its own.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.Timeout)
			defer cancel()
			if _, cerr := s.Provider.Cancel(cctx, t.ProviderJobID); cerr != nil {
				log.WarnContext(ctx, "cancel of the timed-out provider job failed", slog.String("provider_class", string(provider.ClassOf(cerr))))
			}
		}
		return err
	}
	if getErr == nil && s.Redis != nil {
		if err := live.SetProgress(ctx, s.Redis, t.ID, job.Progress, s.Journey.PollMax*3); err != nil {
			log.WarnContext(ctx, "progress not recorded", slog.String("error", err.Error()))
		}
	}
	if getErr != nil {
		log.WarnContext(ctx, "poll failed; polling again later", slog.String("provider_class", string(provider.ClassOf(getErr))), slog.String("error", getErr.Error()))
	}
	interval := min(max(now.Sub(t.UpdatedAt)/4, s.Journey.PollFirst), s.Journey.PollMax)
	interval = max(interval, provider.RetryAfterOf(getErr))
	return s.reschedule(ctx, ev, consumer, t, due, now.Add(interval))
}

// reschedule moves the chain to its next poll: compare-and-set of
// next_poll_at (no version bump) plus the next delayed event.
func (s *poller) reschedule(ctx context.Context, ev envelope.Envelope, consumer string, t task.Task, due task.PollDue, at time.Time) error {
	o := task.FromEnvelope(Name, ev)
	at = at.UTC().Truncate(time.Microsecond)
	_, err := inbox.Do(ctx, s.Pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		moved, err := task.MovePoll(ctx, tx, t.ID, due.PollAt, at)
		if err != nil || !moved {
			return inbox.StaleNoop, err
		}
		next, err := o.EmitAt(t, task.PollDue{TaskID: t.ID, AttemptID: due.AttemptID, PollAt: at}, at)
		if err != nil {
			return "", err
		}
		return inbox.Applied, outbox.Write(ctx, tx, next)
	})
	return err
}

// end applies a job's end in the inbox-protected transaction, then frees
// the task's slots.
func (s *poller) end(ctx context.Context, ev envelope.Envelope, consumer string, t task.Task, log *slog.Logger, fn func(tx pgx.Tx, cur task.Task) error) error {
	out, err := inbox.Do(ctx, s.Pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		cur, err := task.Lock(ctx, tx, t.ID)
		if err != nil {
			return "", err
		}
		if cur.Status != task.ProviderRunning || cur.ProviderJobID != t.ProviderJobID {
			return inbox.StaleNoop, nil
		}
		return inbox.Applied, fn(tx, cur)
	})
	if err == nil && !out.Duplicate && out.Result == inbox.Applied {
		stage.ReleaseSlots(ctx, s.Slots, stage.GenerationSlots(t, t.Provider, s.Journey), log)
	}
	return err
}
