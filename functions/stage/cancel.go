package stage

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// CancelOutcome is what a cancel of a running provider job led to.
type CancelOutcome string

// The outcomes of [DecideCancel].
const (
	// CancelConfirmed: the provider stopped the job (or never ran it):
	// CANCELED, the reservation released.
	CancelConfirmed CancelOutcome = "confirmed"
	// CancelTooLate: the job had already finished; the output is fetched
	// and processed, and the task ends CANCELED_WITH_OUTPUT, charged.
	CancelTooLate CancelOutcome = "too_late"
	// CancelUnknown: the provider did not say; CANCEL_RECONCILING until the
	// reconciler learns which.
	CancelUnknown CancelOutcome = "unknown"
)

// DecideCancel reads the provider's answer to a cancel (or a later look at the
// job) as the product rule says. The poll stage applies it to the cancel call, the reconcile stage
// to CANCEL_RECONCILING tasks.
func DecideCancel(job provider.Job, err error) CancelOutcome {
	switch {
	case err == nil && (job.Status == provider.StatusCanceled || job.Status == provider.StatusFailed):
		return CancelConfirmed
	case err == nil && job.Status == provider.StatusSucceeded:
		return CancelTooLate
	case provider.ClassOf(err) == provider.ClassNotFound:
		// The provider has no such job: nothing ran that could be charged.
		return CancelConfirmed
	}
	return CancelUnknown
}

// ApplyCancel moves a task whose running job was asked to stop, in tx:
// confirmed → CANCELED and release; too late → FETCHING (the cancel flag
// stays, so the task ends CANCELED_WITH_OUTPUT); unknown → CANCEL_RECONCILING
// with a delayed look by the reconciler (already there: a new look only).
func ApplyCancel(ctx context.Context, tx pgx.Tx, o task.Origin, cur task.Task, attemptID uuid.UUID, outcome CancelOutcome, lookAfter time.Duration) error {
	switch outcome {
	case CancelConfirmed:
		if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Canceled, "", ""); err != nil {
			return err
		}
		settle, err := o.Emit(cur, task.SettleRequested{TaskID: cur.ID, Status: task.Canceled})
		if err != nil {
			return err
		}
		_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Canceled, Reason: "canceled at the provider", Events: []outbox.Event{settle}})
		return err
	case CancelTooLate:
		if err := attempt.End(ctx, tx, cur.ID, cur.ProviderJobID, attempt.Succeeded, "", ""); err != nil {
			return err
		}
		fetch, err := o.Emit(cur, task.FetchRequested{TaskID: cur.ID, AttemptID: attemptID})
		if err != nil {
			return err
		}
		_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.Fetching, Reason: "cancel came too late: the provider had finished",
			Set: task.Fields{Progress: task.Ptr(100)}, Events: []outbox.Event{fetch}})
		return err
	}
	at := time.Now().Add(lookAfter).UTC().Truncate(time.Microsecond)
	expect := cur.Version // a new look of a task CANCEL_RECONCILING already
	if cur.Status != task.CancelReconciling {
		expect++
	}
	look, err := o.EmitAt(cur, task.ReconcileDue{TaskID: cur.ID, AttemptID: attemptID, Wait: task.Wait{
		ExpectedStatus: task.CancelReconciling, ExpectedVersion: expect, NotBefore: at, Reason: task.ReasonCancel}}, at)
	if err != nil {
		return err
	}
	if cur.Status == task.CancelReconciling {
		return outbox.Write(ctx, tx, look)
	}
	_, err = task.Apply(ctx, tx, o, cur, task.Transition{To: task.CancelReconciling, Reason: "cancel outcome unknown",
		Events: []outbox.Event{look}})
	return err
}
