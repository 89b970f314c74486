// Package settle is the settle stage: a task or a render that ended is
// charged or refunded, once.
//
// SUCCEEDED and CANCELED_WITH_OUTPUT capture the task's reservation into
// credit_ledger under the reservation's unique business key, and so does
// FAILED with review.content_rejected (the provider charged us for an output the
// content review refused: [task.Task.Charged]); any other FAILED and
// CANCELED release it. The decision is read from the task's state, not the
// message, so a late or repeated settle message cannot change the outcome,
// and the reservation leaves HELD exactly once.
package settle

import (
	"context"
	"errors"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "settle"

// Params are what the stage needs.
type Params struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
}

// New returns the settle function.
func New(p Params) *stage.Function {
	work := func(ctx context.Context, d stage.Delivery[task.SettleRequested]) error {
		// The decision is the task's as locked, not as read before: a
		// concurrent settle may have taken it.
		return d.Apply(ctx, aggregate.Transition[task.Status, task.Task]{If: task.SettleActs}, func(ctx context.Context, tx pgx.Tx, t task.Task) (aggregate.Result, error) {
			var s billing.Settlement
			var err error
			if t.Charged() {
				s, err = billing.Capture(ctx, tx, t.ID)
			} else {
				s, err = billing.Release(ctx, tx, t.ID)
			}
			return settled(ctx, d, s, err)
		})
	}
	return stage.NewTyped(stage.Typed[task.SettleRequested]{Group: catalog.GroupSettle, DB: p.Pool, Logger: p.Logger, Work: work,
		Acts: func(t task.Task, _ task.SettleRequested) bool { return task.SettleActs(t) }, Untasked: settleRender})
}

// settleRender settles a render that ended: SUCCEEDED captures, unless
// its output was stored by an earlier render of the same content (the
// product rule: an identical render is free), FAILED and CANCELED
// release.
func settleRender(ctx context.Context, d stage.Delivery[task.SettleRequested]) error {
	if d.Payload.RenderID == uuid.Nil {
		return outcome.Permanentf("payload.invalid", "payload.task_id: is required (a render's settle names its render_id instead)")
	}
	// No precondition on the status: another tenant's render is refused
	// before its status is looked at, so its work answers stale itself.
	err := stage.ApplyTo(ctx, d, render.Kind, d.Payload.RenderID, render.Guard(), func(ctx context.Context, tx pgx.Tx, j render.Job) (aggregate.Result, error) {
		if err := stage.CheckTenant(d.Env, j.TenantID); err != nil {
			return 0, err
		}
		if !j.Status.Terminal() {
			return aggregate.Stale, nil
		}
		var s billing.Settlement
		var err error
		if j.Status == render.Succeeded && !j.Reused {
			s, err = billing.CaptureRender(ctx, tx, j.ID)
		} else {
			s, err = billing.ReleaseRender(ctx, tx, j.ID)
		}
		return settled(ctx, d, s, err)
	})
	if errors.Is(err, render.ErrNotFound) {
		return outcome.Permanent("render.not_found", err)
	}
	return err
}

// settled is the inbox result of a capture or release that returned s
// and err: applied when it settled the reservation now, a stale no-op
// when it was settled before.
func settled(ctx context.Context, d stage.Delivery[task.SettleRequested], s billing.Settlement, err error) (aggregate.Result, error) {
	if errors.Is(err, billing.ErrNoReservation) {
		return 0, outcome.Permanent("billing.no_reservation", err)
	}
	if err != nil {
		return 0, err
	}
	if !s.Changed {
		return aggregate.Stale, nil
	}
	d.Log.InfoContext(ctx, "settled", slog.String("reservation", s.Status), slog.Int64("amount", s.Amount))
	return aggregate.Applied, nil
}
