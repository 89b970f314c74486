// Package render is the render stage: the final export of a timeline
// revision (seed 7.8.4), in content-addressed chunks.
//
// One event type, render.export.requested, carries three steps. start
// plans the render: an output stored by an earlier render of the same
// content (the render key) ends it at once, reused; otherwise the output
// is cut into frame-aligned chunks (render_chunks, shared by every render
// of the same content) and one event per chunk not stored yet goes out.
// chunk renders one window with one ffmpeg run, so that no delivery runs
// longer than a Knative request may: the delivery claims the chunk with a
// lease first (a duplicate delivery finds the claim and starts no second
// run), renews it while ffmpeg runs, checks the result with ffprobe and
// stores it under a key of its own; the chunk that completes the set asks
// for the join. join concatenates the chunks by stream copy (the sound is
// encoded once), checks the output's duration, stores it with its sha256
// and ends the render SUCCEEDED with a RENDER asset.
//
// ffmpeg and S3 never run inside a transaction. A render that is canceled
// (or failed) while a chunk renders stops its ffmpeg within a watch
// interval and stores nothing; a delivery that dies leaves its claim to
// run out, and the broker's redelivery (or the reconciler) claims the
// chunk again, so a killed render resumes from the chunks already stored.
package render

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outcome"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds the stage's knobs and its one entry: a delivery of
// render.export.requested goes to its step, start (start.go), chunk
// (chunk.go, chunk_render.go, watch.go) or join (join.go); finish.go ends
// a render and tx.go runs the transitions whose work leaves cleanup.

// Name is the stage's name.
const Name = "render"

// Defaults of the stage's knobs.
const (
	// DefaultLease is how long a chunk's claim holds without renewal: a
	// delivery that died gives its chunk up this long after its last
	// renewal.
	DefaultLease = 2 * time.Minute
	// DefaultMaxChunkAttempts is how often a chunk is claimed before the
	// render fails with the last error.
	DefaultMaxChunkAttempts = 4
	// DefaultWatch is how often a running chunk looks whether its render
	// was canceled: half a second, so that a cancel stops ffmpeg within a
	// second (docs/api.md, "Cancel") with room for the look and the kill.
	DefaultWatch = 500 * time.Millisecond
	// DefaultChunkTimeoutFactor and DefaultChunkTimeoutMin bound one
	// chunk's ffmpeg run: this many times the chunk's output, and at
	// least the floor. A chunk renders in about its own length on one
	// core; only a run that hangs (an input that never ends, a filter
	// that loops) comes near the bound.
	DefaultChunkTimeoutFactor = 12
	DefaultChunkTimeoutMin    = time.Minute
)

// Params are what the stage needs.
type Params struct {
	Pool  *pgxpool.Pool
	Blob  *blob.Store
	Media *media.Tool
	// Redis receives live progress; nil: none is recorded.
	Redis  redis.UniversalClient
	TmpDir string // where ffmpeg writes; os.TempDir() when empty
	Logger *slog.Logger
	// ChunkLength is the output one chunk holds; renders.DefaultChunk when
	// zero.
	ChunkLength      time.Duration
	Lease            time.Duration
	MaxChunkAttempts int
	Watch            time.Duration
	// ChunkTimeoutFactor and ChunkTimeoutMin give each chunk's ffmpeg
	// (and ffprobe) runs their deadline: max(ChunkTimeoutMin, the chunk's
	// output × ChunkTimeoutFactor). Their defaults when zero.
	ChunkTimeoutFactor int
	ChunkTimeoutMin    time.Duration
	// Slots and TenantChunks bound how many chunks of one tenant render
	// at once, fleet-wide (RENDER_TENANT_CHUNKS; DefaultTenantChunks when
	// zero); nil Slots: no bound.
	Slots        *slots.Limiter
	TenantChunks int
}

type renderer struct{ Params }

// New returns the render function.
func New(p Params) *stage.Function {
	if p.ChunkLength <= 0 {
		p.ChunkLength = renders.DefaultChunk
	}
	if p.Lease <= 0 {
		p.Lease = DefaultLease
	}
	if p.MaxChunkAttempts <= 0 {
		p.MaxChunkAttempts = DefaultMaxChunkAttempts
	}
	if p.Watch <= 0 {
		p.Watch = DefaultWatch
	}
	if p.ChunkTimeoutFactor <= 0 {
		p.ChunkTimeoutFactor = DefaultChunkTimeoutFactor
	}
	if p.ChunkTimeoutMin <= 0 {
		p.ChunkTimeoutMin = DefaultChunkTimeoutMin
	}
	if p.TenantChunks <= 0 {
		p.TenantChunks = DefaultTenantChunks
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	s := &renderer{Params: p}
	return stage.NewUntasked(stage.Untasked[task.RenderRequested]{Group: catalog.GroupRender, DB: p.Pool, Logger: p.Logger, Work: s.work})
}

func (s *renderer) work(ctx context.Context, d stage.Delivery[task.RenderRequested]) error {
	j, err := renders.Get(ctx, s.Pool, d.Payload.RenderID)
	if errors.Is(err, renders.ErrNotFound) {
		return outcome.Permanent("render.not_found", err)
	}
	if err != nil {
		return err
	}
	if err := stage.CheckTenant(d.Env, j.TenantID); err != nil {
		return err
	}
	switch d.Payload.Step {
	case task.RenderStart:
		return s.start(ctx, d, j)
	case task.RenderChunk:
		return s.chunk(ctx, d, j)
	case task.RenderJoin:
		return s.join(ctx, d, j)
	}
	return outcome.Permanentf("payload.invalid", "a render step is %s, %s or %s, not %q", task.RenderStart, task.RenderChunk, task.RenderJoin, d.Payload.Step)
}
