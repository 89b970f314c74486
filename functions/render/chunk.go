package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds the chunk step: a chunk is claimed (or left to the
// delivery that holds it), rendered (chunk_render.go) and stored, and the
// chunk that completes the set asks for the join.

// chunkLabel is the series of one chunk outcome.
func chunkLabel(outcome string) prometheus.Counter { return chunkOutcomes.WithLabelValues(outcome) }

// held answers the delivery of a chunk another delivery holds (a
// duplicate of this event, or a sibling render of the same content). It is
// neither acknowledged nor written to the inbox (the holder's record is
// the holder's): it comes back when the holder's claim runs out, and then
// finds the chunk stored, or claims it if the holder died. So a killed
// holder is followed by the broker's own redelivery, not only by the
// reconciler; a holder that stays alive renews its claim and the event
// waits again, until the group's delivery attempts run out into the
// quarantine, named.
func (s *renderer) held(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job, index int, slot *tenantSlot) error {
	c, err := renders.GetChunk(ctx, s.Pool, j.TenantID, j.Key, index)
	if err != nil {
		slot.release(ctx)
		return err
	}
	if c.Status != renders.ChunkRendering {
		slot.release(ctx) // nobody renders the chunk: its slot is nobody's
	}
	if c.Status == renders.ChunkDone {
		chunkLabel("already_stored").Inc()
		return d.Noop(ctx)
	}
	duplicateRuns.Inc()
	wait, until := time.Second, "now" // given up meanwhile: claim it at the next delivery
	if c.Status == renders.ChunkRendering && c.LeaseUntil != nil {
		wait, until = max(wait, time.Until(*c.LeaseUntil)+time.Second), c.LeaseUntil.Format(time.RFC3339)
	}
	d.Log.InfoContext(ctx, "chunk is being rendered by another delivery; no second ffmpeg run, the event waits for its claim",
		slog.Int("chunk", index), slog.Duration("wait", wait))
	return outcome.RetryAfter("render.chunk_held", fmt.Errorf("chunk %d of render %s is being rendered by another delivery (claimed until %s); this event waits for that claim",
		index, j.ID, until), wait)
}

// chunk renders one chunk of a running render.
func (s *renderer) chunk(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job) error {
	if j.Status != renders.Rendering {
		return d.Noop(ctx)
	}
	index := d.Payload.Chunk
	c, err := renders.GetChunk(ctx, s.Pool, j.TenantID, j.Key, index)
	if errors.Is(err, renders.ErrNotFound) {
		// The chunks of a joined output are dropped: a sibling render of
		// the same content finished it.
		if done, err := s.reuse(ctx, d, j); done || err != nil {
			return err
		}
		return outcome.Permanentf("render.no_chunk", "render %s has no chunk %d", j.ID, index)
	}
	if err != nil {
		return err
	}
	if c.Status == renders.ChunkDone {
		chunkLabel("already_stored").Inc()
		return d.Noop(ctx)
	}
	slot := s.slotFor(j, index)
	if !slot.take(ctx, d.Log) {
		return s.waitForSlot(ctx, d, j, index)
	}
	l, ok, err := renders.Claim(ctx, s.Pool, j.TenantID, j.Key, index, s.Lease)
	if err != nil {
		// Unknown who holds the chunk: a live holder takes the slot again
		// at its next renewal, a slot kept here would sit idle.
		slot.release(ctx)
		return err
	}
	if !ok {
		return s.held(ctx, d, j, index, slot)
	}
	keepSlot := false // the claim went to another delivery, and the slot with it
	defer func() {
		if !keepSlot {
			slot.release(ctx)
		}
	}()
	if l.Attempt > s.MaxChunkAttempts {
		_ = l.Give(context.WithoutCancel(ctx), s.Pool, c.ErrorMessage)
		msg := fmt.Sprintf("chunk %d of the render could not be rendered in %d attempts", index, s.MaxChunkAttempts)
		if c.ErrorMessage != "" {
			msg += ": " + c.ErrorMessage
		}
		code := "render.chunk_failed"
		if strings.HasPrefix(c.ErrorMessage, chunkTimeoutCode+":") {
			code = chunkTimeoutCode
		}
		return s.fail(ctx, d, j.ID, code, msg)
	}
	obj, err := s.renderChunk(ctx, d, j, c, l, slot)
	if err != nil {
		giveCtx := context.WithoutCancel(ctx)
		if errors.Is(err, errRenderEnded) {
			_ = l.Give(giveCtx, s.Pool, "")
			chunkLabel("stopped").Inc()
			d.Log.InfoContext(ctx, "chunk stopped: the render ended", slog.Int("chunk", index))
			return d.Noop(ctx)
		}
		if errors.Is(err, errLeaseLost) {
			chunkLabel("lease_lost").Inc()
			keepSlot = true
			return nil
		}
		reason := ""
		if ownFailure(err) {
			reason = err.Error()
		} else {
			d.Log.WarnContext(ctx, "chunk not rendered for a reason outside it (storage, database, a cut connection); the attempt is not counted",
				slog.Int("chunk", index), slog.String("error", err.Error()))
		}
		_ = l.Give(giveCtx, s.Pool, reason)
		if outcome.IsPermanent(err) {
			_, code := outcome.Of(err)
			return s.fail(ctx, d, j.ID, code, err.Error())
		}
		chunkLabel("failed").Inc()
		return err
	}
	left, recorded, err := s.store(ctx, d, j, l, obj)
	keepSlot = left.keepSlot
	if err != nil || !recorded {
		// Not recorded (the transaction failed, or the event was applied
		// before): the claim goes back and the object away, unless the
		// chunk names it (a commit whose answer was lost).
		bg := context.WithoutCancel(ctx)
		if c, gerr := renders.GetChunk(bg, s.Pool, j.TenantID, j.Key, index); errors.Is(gerr, renders.ErrNotFound) || (gerr == nil && c.ObjectKey != obj.ObjectKey) {
			_ = l.Give(bg, s.Pool, "")
			s.remove(bg, d.Log, obj.ObjectKey)
		}
		return err
	}
	s.cleanUp(ctx, d.Log, left)
	return nil
}

// store records chunk obj, rendered under lease l, for render j or, when
// j ended meanwhile, for a sibling of the same content still rendering,
// and asks for the join when it completes the set. recorded is false when
// the event was processed before. It leaves obj to remove when nobody
// takes it: no render of the content runs any more (the claim goes back),
// or the claim ran out and another delivery took the chunk (then the slot
// is that delivery's).
func (s *renderer) store(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job, l renders.Lease, obj renders.Stored) (cleanup, bool, error) {
	return s.applyTo(ctx, d, j.ID, renders.Guard(), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, cleanup, error) {
		if cur.Status == renders.Rendering {
			return storeFor(ctx, tx, d, cur, l, obj)
		}
		// Ended meanwhile: the chunk serves a sibling of the same content,
		// or nobody.
		var c cleanup
		res, found, err := onRunningSibling(ctx, tx, cur, func(ctx context.Context, tx pgx.Tx, sib renders.Job) (res aggregate.Result, err error) {
			res, c, err = storeFor(ctx, tx, d, sib, l, obj)
			return res, err
		})
		switch {
		case err != nil:
			return 0, cleanup{}, err
		case !found:
			return aggregate.Stale, cleanup{remove: []string{obj.ObjectKey}}, l.Give(ctx, tx, "")
		}
		return res, c, nil
	})
}

// storeFor records chunk obj, rendered under lease l, for cur, RENDERING
// and locked, and asks for the join when it completes the set.
func storeFor(ctx context.Context, tx pgx.Tx, d stage.Delivery[task.RenderRequested], cur renders.Job, l renders.Lease, obj renders.Stored) (aggregate.Result, cleanup, error) {
	stored, err := l.Store(ctx, tx, obj)
	if err != nil {
		return 0, cleanup{}, err
	}
	if !stored {
		return aggregate.Stale, cleanup{remove: []string{obj.ObjectKey}, keepSlot: true}, nil
	}
	if err := renders.Touch(ctx, tx, cur.TenantID, cur.Key, cur.ID); err != nil {
		return 0, cleanup{}, err
	}
	chunks, err := renders.Chunks(ctx, tx, cur.TenantID, cur.Key)
	if err != nil {
		return 0, cleanup{}, err
	}
	ch := renders.Change{Progress: task.Ptr(renders.DonePercent(chunks, cur.DurationUS)), Progressed: true}
	var events []outbox.Event
	if allDone(chunks) {
		ev, err := cur.Ask(d.Origin, task.RenderJoin, 0)
		if err != nil {
			return 0, cleanup{}, err
		}
		events, ch.JoinRequested = append(events, ev), true
	}
	if _, err := renders.Apply(ctx, tx, d.Origin, cur, ch, events...); err != nil {
		return 0, cleanup{}, err
	}
	return aggregate.Applied, cleanup{count: []prometheus.Counter{chunkLabel("stored")}}, nil
}

// onRunningSibling runs act, as a guarded transition of a RENDERING
// render, on the first render of j's content still RENDERING as locked
// (the list of them was read before the locks). found is false, and act
// did not run, when there is none; act's result and error are returned
// unchanged.
func onRunningSibling(ctx context.Context, tx pgx.Tx, j renders.Job, act aggregate.Act[renders.Job]) (res aggregate.Result, found bool, err error) {
	siblings, err := renders.Siblings(ctx, tx, j)
	if err != nil {
		return 0, false, err
	}
	for _, sib := range siblings {
		ran := false
		res, err = aggregate.Apply(ctx, tx, renders.Kind, sib.ID, renders.Guard(renders.Rendering), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, error) {
			ran = true
			return act(ctx, tx, cur)
		})
		if err != nil || ran {
			return res, ran, err
		}
	}
	return aggregate.Stale, false, nil
}

func allDone(chunks []renders.Chunk) bool {
	for _, c := range chunks {
		if c.Status != renders.ChunkDone {
			return false
		}
	}
	return len(chunks) > 0
}
