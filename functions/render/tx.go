package render

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/inbox"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds the guarded transitions of a render whose work leaves
// something to do once its transaction committed (plan, chunk store,
// join), and that cleanup.

// cleanup is what a transition of a render leaves to do outside its
// transaction, once that committed: storage is never written in one.
type cleanup struct {
	// remove lists objects nothing records any more.
	remove []string
	// keepSlot: the chunk's claim went to another delivery, and its
	// tenant slot (the chunk's, not the delivery's) with it.
	keepSlot bool
	// count lists the counters the work moves: an attempt that did not
	// commit did no work to count.
	count []prometheus.Counter
}

// cleanupAct is the work of a transition whose cleanup follows the
// commit: an [aggregate.Act] that also returns that cleanup.
type cleanupAct func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, cleanup, error)

// applyTo is [stage.ApplyTo] on render id for work that leaves cleanup.
// The inbox runs a transaction again after a serialization failure or a
// deadlock, and an attempt that did not commit leaves nothing to clean
// up: each attempt's act returns a cleanup of its own, and applyTo
// returns the one of the attempt that committed. committed is false, with
// no cleanup, when none of this delivery's attempts did: the event was
// processed before, perhaps by another delivery between two attempts of
// this one. A precondition that did not hold commits a stale no-op that
// leaves nothing.
//
// It runs the inbox itself to learn whether its last attempt found the
// event processed, which [stage.Delivery.InTx] does not say; so act adds
// no after-commit hooks.
func (s *renderer) applyTo(ctx context.Context, d stage.Delivery[task.RenderRequested], id uuid.UUID,
	tr aggregate.Transition[renders.Status, renders.Job], act cleanupAct,
) (c cleanup, committed bool, err error) {
	var last cleanup // the cleanup of the attempt that ran last; read only once it committed
	out, err := inbox.Do(ctx, s.Pool, d.Consumer, d.Env, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		var attempt cleanup // this attempt's own: a precondition that does not hold leaves none
		res, err := aggregate.Apply(ctx, tx, renders.Kind, id, tr, func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, error) {
			res, c, err := act(ctx, tx, cur)
			attempt = c
			return res, err
		})
		last = attempt
		if err != nil {
			return "", err
		}
		if res == aggregate.Applied {
			return inbox.Applied, nil
		}
		return inbox.StaleNoop, nil
	})
	if err != nil || out.Duplicate {
		return cleanup{}, false, err
	}
	return last, true, nil
}

// cleanUp removes the objects a committed transition left unrecorded.
func (s *renderer) cleanUp(ctx context.Context, log *slog.Logger, c cleanup) {
	for _, counter := range c.count {
		counter.Inc()
	}
	for _, key := range c.remove {
		s.remove(ctx, log, key)
	}
}

// remove deletes an object nothing records, best effort: a leftover is
// found by the bucket's lifecycle rule.
func (s *renderer) remove(ctx context.Context, log *slog.Logger, key string) {
	if err := s.Blob.Delete(ctx, key); err != nil {
		log.WarnContext(ctx, "could not remove an unrecorded render object", slog.String("object_key", key), slog.String("error", err.Error()))
	}
}
