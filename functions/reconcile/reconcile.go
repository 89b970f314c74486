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
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
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
	Pool      *pgxpool.Pool
	Providers *provider.Set
	Slots     *slots.Limiter
	// Waitlist gets the slots a reconciled job releases, and its lost
	// wake-ups are repaired by the scan; nil: no wait list.
	Waitlist *waitlist.List
	Journey  config.Journey
	// ReplayWindow is REPLAY_WINDOW: the scan drops outbox and inbox
	// partitions past it; config.DefaultReplayWindow when zero.
	ReplayWindow time.Duration
	Timeout      time.Duration
	// Replays records executed replays' after-snapshots on each scan
	// (replay.Desk); nil skips it.
	Replays ReplayRecorder
	Logger  *slog.Logger
	// Now is the scanner's clock; time.Now when nil. Tests move it
	// forward instead of sleeping.
	Now func() time.Time
	// Maintenance configures the scan's services; zero fields take their
	// Default* constants.
	Maintenance MaintenanceConfig
}

// ReplayRecorder is what a scan asks to record the outcome of replays
// whose event was applied since the last scan: a *replay.Desk.
type ReplayRecorder interface {
	RecordOutcomes(ctx context.Context) (int, error)
}

type reconciler struct {
	Params
	services *services
}

func newReconciler(p Params) *reconciler {
	p = defaults(p)
	return &reconciler{Params: p, services: newServices(p)}
}

// now reads the scanner's clock.
func (r *reconciler) now() time.Time { return clock(r.Params) }

// New returns the reconcile function: delayed looks at a task, and the
// scanners on a periodic trigger.
func New(p Params) *stage.Function {
	r := newReconciler(p)
	p = r.Params
	scan := func(ctx context.Context, ev event.Event) error {
		rep, err := r.Scan(ctx)
		if err != nil {
			return err
		}
		r.Logger.InfoContext(ctx, "reconcile scan", slog.String("trigger", ev.Type()), slog.Any("rescued", rep.Rescued),
			slog.Int("settled", rep.Settled), slog.Int("needs_attention", rep.NeedsAttention), slog.Any("uploads", rep.Uploads), slog.Any("renders", rep.Renders),
			slog.Int("stale_outbox_rows", rep.StaleOutboxRows), slog.Duration("oldest_unpublished", rep.OldestUnpublished),
			slog.Int("replays_applied", rep.ReplaysApplied), slog.Int64("delivery_failures_pruned", rep.FailuresPruned),
			slog.Any("retention", rep.Retention))
		return nil
	}
	return stage.Combine(stage.Params{Name: Name, Logger: p.Logger, Triggers: map[string]stage.TriggerFunc{ScanEventType: scan, PingEventType: scan}},
		stage.Typed[task.ReconcileDue]{Group: catalog.GroupReconcile, DB: p.Pool, Logger: p.Logger,
			Acts: func(t task.Task, due task.ReconcileDue) bool {
				return task.ReconcileCancelActs(t, due) || task.ReconcileSubmitActs(t)
			},
			Work: r.work})
}

// again is the next look of a task whose look found nothing final: the
// same attempt one round later, carrying its wait.
func again(cur task.Task, due task.ReconcileDue, at time.Time) task.ReconcileDue {
	next := due
	next.Round++
	next.Outages = 0
	next.Wait = task.Wait{ExpectedStatus: cur.Status, ExpectedVersion: cur.Version, NotBefore: at.UTC().Truncate(time.Microsecond),
		Reason: due.Reason, RetryAttempt: next.Round}
	return next
}

// outage reports a lookup the provider did not answer at all: a 429, a 503
// or 408, no connection, an open circuit. It says nothing about the job,
// so it is not a round toward RECONCILE_MAX_ROUNDS: an outage longer than
// the rounds must not hand a task to a person.
func outage(err error) bool {
	switch provider.ClassOf(err) {
	case provider.ClassUnavailable, provider.ClassRateLimited:
		return provider.RefusedOutright(err)
	}
	return false
}

// afterOutage looks the lost submit up again later, the wait doubling from
// RECONCILE_DELAY (or the provider's Retry-After) up to the rounds' span,
// which keeps it under the scanner's patience; each such lookup touches
// the task, so the scanner sees the chain alive. Past
// RECONCILE_OUTAGE_HORIZON after the submit a person decides.
func (r *reconciler) afterOutage(ctx context.Context, tx pgx.Tx, d stage.Delivery[task.ReconcileDue], cur task.Task, submitted time.Time, findErr error, now time.Time) error {
	due, o, j := d.Payload, d.Origin, r.Journey
	if j.ReconcileOutageHorizon > 0 && now.Sub(submitted) >= j.ReconcileOutageHorizon {
		r.releaseSlots(d)
		msg := fmt.Sprintf("the provider answered none of the lookups of the lost submit for %s after it (the last %d met an outage: %v); "+
			"whether it created a job is unknown and resubmitting could pay twice, so a person decides: adapter tasks resolve <task> --job <id> or --no-job",
			now.Sub(submitted).Round(time.Second), due.Outages+1, findErr)
		_, err := task.Apply(ctx, tx, o, cur, task.Transition{To: task.NeedsAttention, Reason: "submit outcome unknown",
			Set: task.Fields{ErrorCode: task.Ptr("reconcile.submit_unknown"), ErrorMessage: &msg}})
		return err
	}
	wait := j.ReconcileAfter
	for range min(due.Outages, 16) {
		wait *= 2
	}
	wait = min(max(wait, provider.RetryAfterOf(findErr)), j.ReconcileAfter*time.Duration(j.ReconcileRounds))
	at := now.Add(wait)
	next := due
	next.Outages++
	next.Wait = task.Wait{ExpectedStatus: cur.Status, ExpectedVersion: cur.Version + 1, NotBefore: at.UTC().Truncate(time.Microsecond),
		Reason: due.Reason, RetryAttempt: due.Round}
	look, err := o.EmitAt(cur, next, at)
	if err != nil {
		return err
	}
	_, err = task.Touch(ctx, tx, o, cur, fmt.Sprintf("lookup met a provider outage (%s), not a round; looking again in %s", provider.ClassOf(findErr), wait), look)
	return err
}

// releaseSlots frees the task's slots once the delivery's work committed.
func (r *reconciler) releaseSlots(d stage.Delivery[task.ReconcileDue]) {
	d.AfterCommit(func(ctx context.Context) {
		stage.ReleaseSlots(ctx, r.Slots, r.Waitlist, stage.GenerationSlots(d.Task, d.Task.Provider, r.Journey), d.Log)
	})
}

func (r *reconciler) work(ctx context.Context, d stage.Delivery[task.ReconcileDue]) error {
	t, due := d.Task, d.Payload
	if task.ReconcileCancelActs(t, due) {
		return r.settleCancel(ctx, d)
	}
	lost, err := attempt.Get(ctx, r.Pool, t.ID, due.AttemptID)
	if errors.Is(err, attempt.ErrNotFound) || (err == nil && lost.Status != attempt.SubmitUnknown) {
		return d.Noop(ctx)
	}
	if err != nil {
		return err
	}
	c, err := stage.ProviderOf(r.Providers, lost.Provider)
	if err != nil {
		return d.Escalate(ctx, err, func(context.Context) { r.releaseSlots(d) })
	}
	findCtx, cancel := context.WithTimeout(ctx, r.Timeout)
	job, findErr := c.FindByClientRequestID(findCtx, lost.ClientRequestID, lost.StartedAt().Add(-lookBack))
	cancel()

	o := d.Origin
	return d.Locked(ctx, task.Reconciling, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		now := time.Now()
		switch provider.ClassOf(findErr) {
		case "":
			if err := attempt.Found(ctx, tx, due.AttemptID, job.ID); err != nil {
				return err
			}
			pollAt := now.Add(r.Journey.PollFirst).UTC().Truncate(time.Microsecond)
			poll, err := o.EmitAt(cur, task.PollDue{TaskID: cur.ID, AttemptID: due.AttemptID, PollAt: pollAt, Wait: task.Wait{
				ExpectedStatus: task.ProviderRunning, ExpectedVersion: cur.Version + 1, NotBefore: pollAt, Reason: "lost submit found"}}, pollAt)
			if err != nil {
				return err
			}
			_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.ProviderRunning, Reason: "lost submit found at the provider",
				Set:    task.Fields{ProviderJobID: task.Ptr(job.ID), NextPollAt: &pollAt, DeadlineAt: task.Ptr(now.Add(r.Journey.MaxWait))},
				Events: []outbox.Event{poll}})
			return err
		case provider.ClassNotFound:
			if err := attempt.Reopen(ctx, tx, due.AttemptID); err != nil {
				return err
			}
			resubmit, err := o.Emit(cur, task.SubmitRequested{TaskID: cur.ID, Version: cur.Version + 1})
			if err != nil {
				return err
			}
			_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Submitting, Reason: "provider has no job for the lost submit; resubmitting with the same key",
				Events: []outbox.Event{resubmit}})
			return err
		}
		if code := provider.CodeOf(findErr); code == provider.CodeLookupUnsupported {
			r.releaseSlots(d)
			msg := fmt.Sprintf("the submit's answer was lost, and provider %s offers no way to look its job up (%v): whether it created a job is unknown; "+
				"resubmitting could pay twice, so a person decides: look for a job created at %s at the provider, then adapter tasks resolve <task> --job <id> or --no-job",
				lost.Provider, findErr, lost.StartedAt().UTC().Format(time.RFC3339))
			_, err := task.Apply(ctx, tx, o, cur, task.Transition{To: task.NeedsAttention, Reason: "submit outcome unknown",
				Set: task.Fields{ErrorCode: task.Ptr("reconcile.submit_unknown"), ErrorMessage: &msg}})
			return err
		}
		if outage(findErr) {
			return r.afterOutage(ctx, tx, d, cur, lost.StartedAt(), findErr, now)
		}
		if due.Round+1 >= r.Journey.ReconcileRounds {
			r.releaseSlots(d)
			msg := fmt.Sprintf("could not learn whether the provider accepted the submit after %d lookups (last: %v); resubmitting could pay twice, so a person decides (adapter tasks resolve)",
				due.Round+1, findErr)
			_, err := task.Apply(ctx, tx, o, cur, task.Transition{To: task.NeedsAttention, Reason: "submit outcome unknown",
				Set: task.Fields{ErrorCode: task.Ptr("reconcile.submit_unknown"), ErrorMessage: &msg}})
			return err
		}
		// The next lookup touches the task, as an outage's does: the
		// scanner sees a chain that runs as alive, however slowly.
		at := now.Add(r.Journey.ReconcileAfter)
		next := again(cur, due, at)
		next.ExpectedVersion = cur.Version + 1
		look, err := o.EmitAt(cur, next, at)
		if err != nil {
			return err
		}
		_, err = task.Touch(ctx, tx, o, cur, fmt.Sprintf("lookup %d of %d did not find out (%v); looking again in %s",
			due.Round+1, r.Journey.ReconcileRounds, provider.ClassOf(findErr), r.Journey.ReconcileAfter), look)
		return err
	})
}
