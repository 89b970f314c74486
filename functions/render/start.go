package render

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds the start step: a queued render is planned into its
// chunks, one event per chunk not stored yet, or ends with an output an
// identical render stored before.

// start plans a queued render, or ends it with the output an identical
// render stored before.
func (s *renderer) start(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job) error {
	if j.Status != renders.Queued {
		return d.Noop(ctx)
	}
	if done, err := s.reuse(ctx, d, j); done || err != nil {
		return err
	}
	profile, ok := media.Profiles[j.Profile]
	if !ok {
		return s.fail(ctx, d, j.ID, "render.bad_profile", fmt.Sprintf("profile %q is not offered", j.Profile))
	}
	windows, err := renders.Plan(j.Key, j.DurationUS, profile.FPS, s.ChunkLength)
	if err != nil {
		return s.fail(ctx, d, j.ID, "render.bad_plan", err.Error())
	}
	c, _, err := s.applyTo(ctx, d, j.ID, renders.Guard(renders.Queued), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, cleanup, error) {
		return plan(ctx, d, tx, cur, windows)
	})
	if err != nil {
		return err
	}
	s.cleanUp(ctx, d.Log, c)
	return nil
}

// plan moves the queued render cur to RENDERING with its chunks in
// windows and asks for each one not stored yet (for the join when all
// are), or ends it with an output stored meanwhile. It leaves the objects
// of chunks of another plan, which it dropped, to remove.
func plan(ctx context.Context, d stage.Delivery[task.RenderRequested], tx pgx.Tx, cur renders.Job, windows []renders.Window) (aggregate.Result, cleanup, error) {
	// A sibling's join may have stored the output since it was looked
	// for: its transaction dropped the chunks this one would plan again.
	if out, ok, err := storedOutput(ctx, tx, cur); err != nil || ok {
		if err != nil {
			return 0, cleanup{}, err
		}
		if _, err := renders.Apply(ctx, tx, d.Origin, cur, renders.Change{To: renders.Succeeded, OutputAssetID: &out,
			Reused: true, Progress: task.Ptr(100)}); err != nil {
			return 0, cleanup{}, err
		}
		return aggregate.Applied, cleanup{count: []prometheus.Counter{reusedOutputs}}, nil
	}
	dropped, err := renders.AddChunks(ctx, tx, cur.TenantID, cur.Key, windows)
	if err != nil {
		if errors.Is(err, renders.ErrOtherPlanRendering) {
			return 0, cleanup{}, outcome.Retryable("render.plan_busy", err)
		}
		return 0, cleanup{}, err
	}
	chunks, err := renders.Chunks(ctx, tx, cur.TenantID, cur.Key)
	if err != nil {
		return 0, cleanup{}, err
	}
	var events []outbox.Event
	for _, c := range chunks {
		if c.Status == renders.ChunkDone {
			continue
		}
		ev, err := cur.Ask(d.Origin, task.RenderChunk, c.Window.Index)
		if err != nil {
			return 0, cleanup{}, err
		}
		events = append(events, ev)
	}
	ch := renders.Change{To: renders.Rendering, Progress: task.Ptr(renders.DonePercent(chunks, cur.DurationUS))}
	if len(events) == 0 { // every chunk was stored by an earlier render of this content
		ev, err := cur.Ask(d.Origin, task.RenderJoin, 0)
		if err != nil {
			return 0, cleanup{}, err
		}
		events, ch.JoinRequested = append(events, ev), true
	}
	if _, err := renders.Apply(ctx, tx, d.Origin, cur, ch, events...); err != nil {
		return 0, cleanup{}, err
	}
	d.Log.InfoContext(ctx, "render planned", slog.Int("chunks", len(chunks)), slog.Int("to_render", len(events)))
	return aggregate.Applied, cleanup{remove: dropped}, nil
}
