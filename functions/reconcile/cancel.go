package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// settleCancel decides a CANCEL_RECONCILING task: the client canceled while
// its provider job ran, and the provider's answer to the cancel was lost
// or not final. It looks at the job (asking it to stop again while it
// still runs) and applies the cancel rule: stopped → CANCELED and release;
// finished first → FETCHING, ending CANCELED_WITH_OUTPUT; still unknown →
// look again later, RECONCILE_MAX_ROUNDS times, then NEEDS_ATTENTION.
func (r *reconciler) settleCancel(ctx context.Context, d stage.Delivery[task.ReconcileDue]) error {
	t, due, o := d.Task, d.Payload, d.Origin
	c, err := stage.ProviderOf(r.Providers, t.Provider)
	if err != nil {
		return d.Escalate(ctx, err, func(context.Context) { r.releaseSlots(d) })
	}
	cctx, cancel := context.WithTimeout(ctx, r.Timeout)
	job, err := c.Get(cctx, t.ProviderJobID)
	if err == nil && !job.Status.Terminal() {
		job, err = c.Cancel(cctx, t.ProviderJobID)
	}
	cancel()
	decided := stage.DecideCancel(job, err)
	// last is what the final look found, for a person to start from.
	last := fmt.Sprintf("job %s", job.Status)
	if err != nil {
		last = string(provider.ClassOf(err))
	}
	return d.Locked(ctx, task.CancelReconciling, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		if decided != stage.CancelUnknown {
			r.releaseSlots(d)
			return stage.ApplyCancel(ctx, tx, o, cur, due.AttemptID, decided, r.Journey.ReconcileAfter)
		}
		if due.Round+1 >= r.Journey.ReconcileRounds {
			r.releaseSlots(d)
			msg := fmt.Sprintf("could not learn whether provider job %s stopped after the client's cancel (%d looks, last: %v); a person decides whether to charge",
				cur.ProviderJobID, due.Round+1, last)
			_, err := task.Apply(ctx, tx, o, cur, task.Transition{To: task.NeedsAttention, Reason: "cancel outcome unknown",
				Set: task.Fields{ErrorCode: task.Ptr("reconcile.cancel_unknown"), ErrorMessage: &msg}})
			return err
		}
		at := time.Now().Add(r.Journey.ReconcileAfter)
		look, err := o.EmitAt(cur, again(cur, due, at), at)
		if err != nil {
			return err
		}
		return outbox.Write(ctx, tx, look)
	})
}
