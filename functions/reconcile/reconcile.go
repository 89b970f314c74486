// Package reconcile is the reconcile stage. This first part settles
// submits whose answer was lost: the task is RECONCILING and its attempt
// SUBMIT_UNKNOWN, so the provider may or may not have a job.
//
// The provider is asked for a job made with the attempt's client request
// id. Found: its id is recorded and the task runs (PROVIDER_RUNNING, first
// poll). Confirmed absent: the task goes back to SUBMITTING with the same
// attempt, so the resubmit carries the same idempotency key and cannot
// start a second job even if the lookup was wrong. Unanswered: the lookup
// is tried again later, RECONCILE_MAX_ROUNDS times, and then the task
// NEEDS_ATTENTION: resubmitting blind could pay twice.
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "reconcile"

// PingEventType is the type Knative's PingSource gives its events: the
// periodic trigger in a deployment (knative/base/reconcile-ping.yaml).
const PingEventType = "dev.knative.sources.ping"

// lookBack widens the provider lookup's time window below the attempt's
// start, for clock skew between us and the provider.
const lookBack = 5 * time.Minute

// Params are what the stage needs.
type Params struct {
	Pool     *pgxpool.Pool
	Provider provider.Client
	Slots    *slots.Limiter
	Journey  config.Journey
	Timeout  time.Duration
	Logger   *slog.Logger
}

type reconciler struct{ Params }

// New returns the reconcile function.
func New(p Params) *stage.Function {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	r := &reconciler{Params: p}
	scan := func(ctx context.Context, ev event.Event) error {
		rep, err := r.Scan(ctx)
		if err != nil {
			return err
		}
		r.Logger.InfoContext(ctx, "reconcile scan", slog.String("trigger", ev.Type()), slog.Any("rescued", rep.Rescued),
			slog.Int("settled", rep.Settled), slog.Int("needs_attention", rep.NeedsAttention),
			slog.Int("stale_outbox_rows", rep.StaleOutboxRows), slog.Duration("oldest_unpublished", rep.OldestUnpublished))
		return nil
	}
	return stage.New(stage.Params{Name: Name, EventTypes: []string{catalog.EventReconcileDue}, Work: r.work, Logger: p.Logger,
		Triggers: map[string]stage.TriggerFunc{ScanEventType: scan, PingEventType: scan}})
}

func (r *reconciler) work(ctx context.Context, ev envelope.Envelope) error {
	due, err := stage.Decode[task.ReconcileDue](ev)
	if err != nil {
		return err
	}
	consumer := catalog.GroupReconcile.Name
	t, err := stage.ReadTask(ctx, r.Pool, ev, due.TaskID)
	if err != nil {
		return err
	}
	if task.ReconcileCancelActs(t, due) {
		return r.settleCancel(ctx, ev, consumer, t, due)
	}
	if !task.ReconcileSubmitActs(t) {
		return stage.Noop(ctx, r.Pool, consumer, ev)
	}
	lost, err := attempt.Get(ctx, r.Pool, t.ID, due.AttemptID)
	if errors.Is(err, attempt.ErrNotFound) || (err == nil && lost.Status != attempt.SubmitUnknown) {
		return stage.Noop(ctx, r.Pool, consumer, ev)
	}
	if err != nil {
		return err
	}
	findCtx, cancel := context.WithTimeout(ctx, r.Timeout)
	job, findErr := r.Provider.FindByClientRequestID(findCtx, lost.ClientRequestID, lost.StartedAt().Add(-lookBack))
	cancel()

	o := task.FromEnvelope(Name, ev)
	log := r.Logger.With(slog.String("task_id", t.ID.String()), slog.String("event_id", ev.EventID))
	var gaveUp bool
	_, err = inbox.Do(ctx, r.Pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		gaveUp = false
		cur, err := task.Lock(ctx, tx, t.ID)
		if err != nil {
			return "", err
		}
		if cur.Status != task.Reconciling {
			return inbox.StaleNoop, nil
		}
		now := time.Now()
		switch provider.ClassOf(findErr) {
		case "":
			if err := attempt.Found(ctx, tx, due.AttemptID, job.ID); err != nil {
				return "", err
			}
			pollAt := now.Add(r.Journey.PollFirst).UTC().Truncate(time.Microsecond)
			poll, err := o.EmitAt(cur, task.PollDue{TaskID: cur.ID, AttemptID: due.AttemptID, PollAt: pollAt}, pollAt)
			if err != nil {
				return "", err
			}
			_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.ProviderRunning, Reason: "lost submit found at the provider",
				Set:    task.Fields{ProviderJobID: task.Ptr(job.ID), NextPollAt: &pollAt, DeadlineAt: task.Ptr(now.Add(r.Journey.MaxWait))},
				Events: []outbox.Event{poll}})
			return inbox.Applied, err
		case provider.ClassNotFound:
			if err := attempt.Reopen(ctx, tx, due.AttemptID); err != nil {
				return "", err
			}
			resubmit, err := o.Emit(cur, task.SubmitRequested{TaskID: cur.ID, Version: cur.Version + 1})
			if err != nil {
				return "", err
			}
			_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Submitting, Reason: "provider has no job for the lost submit; resubmitting with the same key",
				Events: []outbox.Event{resubmit}})
			return inbox.Applied, err
		}
		if due.Round+1 >= r.Journey.ReconcileRounds {
			gaveUp = true
			msg := fmt.Sprintf("could not learn whether the provider accepted the submit after %d lookups (last: %v); resubmitting could pay twice, so a person decides",
				due.Round+1, findErr)
			_, err := task.Apply(ctx, tx, o, cur, task.Transition{To: task.NeedsAttention, Reason: "submit outcome unknown",
				Set: task.Fields{ErrorCode: task.Ptr("reconcile.submit_unknown"), ErrorMessage: &msg}})
			return inbox.Applied, err
		}
		next := due
		next.Round++
		again, err := o.EmitAt(cur, next, now.Add(r.Journey.ReconcileAfter))
		if err != nil {
			return "", err
		}
		return inbox.Applied, outbox.Write(ctx, tx, again)
	})
	if err == nil && gaveUp {
		stage.ReleaseSlots(ctx, r.Slots, stage.GenerationSlots(t, t.Provider, r.Journey), log)
	}
	return err
}
