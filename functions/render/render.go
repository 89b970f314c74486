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
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/project"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

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

// chunkTimeoutCode is the error code of a chunk whose ffmpeg run passed its
// deadline and was killed. The chunk is tried again, up to
// MaxChunkAttempts; a render whose chunk ran out of attempts so fails with
// this code.
const chunkTimeoutCode = "render.chunk_timeout"

// errChunkTimeout ends a chunk's ffmpeg run past its deadline.
var errChunkTimeout = errors.New("the chunk's deadline passed")

// urlTTL is how long the presigned URLs ffmpeg reads through hold: longer
// than any one delivery.
const urlTTL = time.Hour

// progressTTL is how long a chunk's live progress is kept in Redis.
const progressTTL = time.Hour

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
	var dropped []string // objects of chunks of another plan
	err = d.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		dropped = nil
		cur, err := renders.Lock(ctx, tx, j.ID)
		if err != nil {
			return "", err
		}
		if cur.Status != renders.Queued {
			return inbox.StaleNoop, nil
		}
		// A sibling's join may have stored the output since it was looked
		// for: its transaction dropped the chunks this one would plan again.
		if out, ok, err := storedOutput(ctx, tx, cur); err != nil || ok {
			if err != nil {
				return "", err
			}
			if _, err := renders.Apply(ctx, tx, d.Origin, cur, renders.Change{To: renders.Succeeded, OutputAssetID: &out,
				Reused: true, Progress: task.Ptr(100)}); err != nil {
				return "", err
			}
			reusedOutputs.Inc()
			return inbox.Applied, nil
		}
		if dropped, err = renders.AddChunks(ctx, tx, cur.TenantID, cur.Key, windows); err != nil {
			if errors.Is(err, renders.ErrOtherPlanRendering) {
				return "", outcome.Retryable("render.plan_busy", err)
			}
			return "", err
		}
		chunks, err := renders.Chunks(ctx, tx, cur.TenantID, cur.Key)
		if err != nil {
			return "", err
		}
		var events []outbox.Event
		for _, c := range chunks {
			if c.Status == renders.ChunkDone {
				continue
			}
			ev, err := cur.Ask(d.Origin, task.RenderChunk, c.Window.Index)
			if err != nil {
				return "", err
			}
			events = append(events, ev)
		}
		ch := renders.Change{To: renders.Rendering, Progress: task.Ptr(renders.DonePercent(chunks, cur.DurationUS))}
		if len(events) == 0 { // every chunk was stored by an earlier render of this content
			ev, err := cur.Ask(d.Origin, task.RenderJoin, 0)
			if err != nil {
				return "", err
			}
			events, ch.JoinRequested = append(events, ev), true
		}
		if _, err := renders.Apply(ctx, tx, d.Origin, cur, ch, events...); err != nil {
			return "", err
		}
		d.Log.InfoContext(ctx, "render planned", slog.Int("chunks", len(chunks)), slog.Int("to_render", len(events)))
		return inbox.Applied, nil
	})
	if err == nil {
		for _, key := range dropped {
			s.remove(ctx, d.Log, key)
		}
	}
	return err
}

// outputKey is where the output of j's content is stored.
func outputKey(j renders.Job) (string, error) {
	key, err := blob.RenderKey(j.TenantID.String(), j.Key, "output.mp4")
	if err != nil {
		return "", outcome.Permanent("render.bad_key", err)
	}
	return key, nil
}

// storedOutput finds the RENDER asset of j's content, if one is stored.
func storedOutput(ctx context.Context, q pg.Querier, j renders.Job) (uuid.UUID, bool, error) {
	key, err := outputKey(j)
	if err != nil {
		return uuid.Nil, false, err
	}
	var id uuid.UUID
	err = q.QueryRow(ctx, `SELECT asset_id FROM assets WHERE object_key = $1 AND kind = 'RENDER' AND tenant_id = $2 AND status = 'READY'`,
		key, j.TenantID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, false, nil
	}
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("look for stored render output: %w", err)
	}
	return id, true, nil
}

// reuse ends j with the output of its content when one is stored (done
// true).
func (s *renderer) reuse(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job) (done bool, err error) {
	out, ok, err := storedOutput(ctx, s.Pool, j)
	if err != nil || !ok {
		return false, err
	}
	return true, s.finish(ctx, d, j.ID, out, true)
}

// finish ends a running or queued render SUCCEEDED with output.
func (s *renderer) finish(ctx context.Context, d stage.Delivery[task.RenderRequested], id, output uuid.UUID, reused bool) error {
	return stage.ApplyTo(ctx, d, renders.Kind, id, renders.Running().Into(renders.Succeeded), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, error) {
		if _, err := renders.Apply(ctx, tx, d.Origin, cur, renders.Change{To: renders.Succeeded, OutputAssetID: &output,
			Reused: reused, Progress: task.Ptr(100)}); err != nil {
			return 0, err
		}
		if reused {
			reusedOutputs.Inc()
			d.Log.InfoContext(ctx, "render reused a stored output", slog.String("asset_id", output.String()))
		}
		return aggregate.Applied, nil
	})
}

// fail ends a render that is not over yet FAILED with a reason.
func (s *renderer) fail(ctx context.Context, d stage.Delivery[task.RenderRequested], id uuid.UUID, code, message string) error {
	return stage.ApplyTo(ctx, d, renders.Kind, id, renders.Running().Into(renders.Failed), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, error) {
		if _, err := renders.Apply(ctx, tx, d.Origin, cur, renders.Change{To: renders.Failed, ErrorCode: code, ErrorMessage: message}); err != nil {
			return 0, err
		}
		d.Log.WarnContext(ctx, "render failed", slog.String("code", code), slog.String("message", message))
		return aggregate.Applied, nil
	})
}

// inputs presigns a URL for every asset j's spec reads.
func (s *renderer) inputs(ctx context.Context, j renders.Job, ids []uuid.UUID) (map[uuid.UUID]media.RenderInput, error) {
	out := make(map[uuid.UUID]media.RenderInput, len(ids))
	for _, id := range ids {
		a, err := asset.OfTenant(ctx, s.Pool, j.TenantID, id)
		if errors.Is(err, asset.ErrNotFound) {
			return nil, outcome.Permanentf("render.input_missing", "input asset %s of the revision no longer exists", id)
		}
		if err != nil {
			return nil, err
		}
		// Checked again for every chunk: a review may have rejected an
		// input since the render was asked for.
		if a.Status == asset.Failed && a.ErrorCode == task.ErrContentRejected || a.Review == string(review.Rejected) {
			return nil, outcome.Permanentf("render.input_rejected", "input asset %s of the revision was rejected by the content review of its generation: it is not rendered, and the render is not charged", id)
		}
		if !a.Usable() {
			return nil, outcome.Permanentf("render.input_unusable", "input %s of the revision cannot be rendered", a.Unusable())
		}
		url, err := s.Blob.PresignGet(ctx, a.ObjectKey, urlTTL)
		if err != nil {
			return nil, fmt.Errorf("presign input %s: %w", id, err)
		}
		out[id] = media.RenderInput{URL: url, HasAudio: a.AudioCodec != ""}
	}
	return out, nil
}

// workDir makes a temporary directory for one step; the caller removes it.
func (s *renderer) workDir(step string) (string, error) {
	dir, err := os.MkdirTemp(s.TmpDir, "render-"+step+"-*")
	if err != nil {
		return "", fmt.Errorf("make work directory: %w", err)
	}
	return dir, nil
}

// chunkLabel is the series of one chunk outcome.
func chunkLabel(outcome string) prometheus.Counter { return chunkOutcomes.WithLabelValues(outcome) }

// errRenderEnded: the render left RENDERING while a step ran.
var errRenderEnded = errors.New("the render is no longer rendering")

// errLeaseLost: the chunk's claim ran out and another delivery took it.
var errLeaseLost = errors.New("the chunk's claim was lost to another delivery")

// watch runs while a chunk renders: it renews the lease and stops the
// work (cancel with a cause) when no render of the content is RENDERING
// any more or the claim was lost. It returns when ctx ends.
func (s *renderer) watch(ctx context.Context, cancel context.CancelCauseFunc, j renders.Job, l renders.Lease, slot *tenantSlot) {
	tick := time.NewTicker(s.Watch)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// The chunk is the content's: it is still wanted while any render
		// of the same content runs (a sibling, when this one was canceled).
		var wanted bool
		if err := s.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM render_jobs WHERE tenant_id = $1 AND render_key = $2 AND status = 'RENDERING')`,
			j.TenantID, j.Key).Scan(&wanted); err == nil && !wanted {
			cancel(errRenderEnded)
			return
		}
		if time.Since(renewed) >= s.Lease/4 {
			ok, err := l.Extend(ctx, s.Pool, s.Lease)
			if err == nil && !ok {
				cancel(errLeaseLost)
				return
			}
			if err == nil {
				renewed = time.Now()
			}
			slot.renew(ctx)
		}
	}
}

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
	var orphan string // an object nothing records once the transaction committed
	ran := false
	err = d.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		ran, orphan = true, ""
		cur, err := renders.Lock(ctx, tx, j.ID)
		if err != nil {
			return "", err
		}
		if cur.Status != renders.Rendering {
			// Ended meanwhile: the chunk serves a sibling of the same
			// content, or nobody.
			next, err := runningSibling(ctx, tx, cur)
			if err != nil {
				return "", err
			}
			if next == nil {
				orphan = obj.ObjectKey
				return inbox.StaleNoop, l.Give(ctx, tx, "")
			}
			cur = *next
		}
		stored, err := l.Store(ctx, tx, obj)
		if err != nil {
			return "", err
		}
		if !stored {
			// The claim ran out and another delivery took the chunk: the
			// slot is that delivery's now.
			orphan, keepSlot = obj.ObjectKey, true
			return inbox.StaleNoop, nil
		}
		if err := renders.Touch(ctx, tx, cur.TenantID, cur.Key, cur.ID); err != nil {
			return "", err
		}
		chunks, err := renders.Chunks(ctx, tx, cur.TenantID, cur.Key)
		if err != nil {
			return "", err
		}
		ch := renders.Change{Progress: task.Ptr(renders.DonePercent(chunks, cur.DurationUS)), Progressed: true}
		var events []outbox.Event
		if allDone(chunks) {
			ev, err := cur.Ask(d.Origin, task.RenderJoin, 0)
			if err != nil {
				return "", err
			}
			events, ch.JoinRequested = append(events, ev), true
		}
		if _, err := renders.Apply(ctx, tx, d.Origin, cur, ch, events...); err != nil {
			return "", err
		}
		chunkLabel("stored").Inc()
		return inbox.Applied, nil
	})
	if err != nil || !ran {
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
	if orphan != "" {
		s.remove(ctx, d.Log, orphan)
	}
	return nil
}

// runningSibling locks the first render of j's content still RENDERING,
// nil when there is none.
func runningSibling(ctx context.Context, tx pgx.Tx, j renders.Job) (*renders.Job, error) {
	siblings, err := renders.Siblings(ctx, tx, j)
	if err != nil {
		return nil, err
	}
	for _, sib := range siblings {
		locked, err := renders.Lock(ctx, tx, sib.ID)
		if err != nil {
			return nil, err
		}
		if locked.Status == renders.Rendering {
			return &locked, nil
		}
	}
	return nil, nil
}

func allDone(chunks []renders.Chunk) bool {
	for _, c := range chunks {
		if c.Status != renders.ChunkDone {
			return false
		}
	}
	return len(chunks) > 0
}

// renderChunk runs ffmpeg for chunk c under lease l, checks the result and
// stores it under a key of the claim's own.
func (s *renderer) renderChunk(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job, c renders.Chunk, l renders.Lease,
	slot *tenantSlot) (renders.Stored, error) {
	rev, err := project.GetRevision(ctx, s.Pool, j.TenantID, j.RevisionID)
	if err != nil {
		return renders.Stored{}, fmt.Errorf("read revision: %w", err)
	}
	profile := media.Profiles[j.Profile]
	inputs, err := s.inputs(ctx, j, rev.Spec.Assets())
	if err != nil {
		return renders.Stored{}, err
	}
	dir, err := s.workDir("chunk")
	if err != nil {
		return renders.Stored{}, err
	}
	defer os.RemoveAll(dir)

	wctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.watch(wctx, cancel, j, l, slot)
	}()
	defer func() {
		cancel(nil)
		wg.Wait()
	}()

	out := filepath.Join(dir, "chunk.mkv")
	var lastReport time.Time
	progress := func(doneUS int64) {
		if s.Redis == nil || time.Since(lastReport) < time.Second {
			return
		}
		lastReport = time.Now()
		if err := live.SetChunkProgress(wctx, s.Redis, j.ID, c.Window.Index, doneUS, progressTTL); err != nil {
			d.Log.DebugContext(ctx, "chunk progress not recorded", slog.String("error", err.Error()))
		}
	}
	started := time.Now()
	length := time.Duration(c.DurationUS()) * time.Microsecond
	limit := max(s.ChunkTimeoutMin, length*time.Duration(s.ChunkTimeoutFactor))
	tctx, cancelTimeout := context.WithTimeoutCause(wctx, limit, errChunkTimeout)
	defer cancelTimeout()
	timedOut := func() error {
		if !errors.Is(context.Cause(tctx), errChunkTimeout) {
			return nil
		}
		return fmt.Errorf("%s: chunk %d (%s to %s of the timeline) did not render within %s (%d times its %s of output, at least %s): ffmpeg was stopped; "+
			"an input that never ends or a machine starved of CPU are the usual causes",
			chunkTimeoutCode, c.Window.Index, time.Duration(c.Window.FromUS)*time.Microsecond, time.Duration(c.Window.ToUS)*time.Microsecond,
			limit, s.ChunkTimeoutFactor, length, s.ChunkTimeoutMin)
	}
	err = s.Media.RenderChunk(tctx, media.Chunk{Spec: rev.Spec, Inputs: inputs, Profile: profile,
		FromUS: c.Window.FromUS, ToUS: c.Window.ToUS, Output: out, TmpDir: dir, Progress: progress})
	if cause := context.Cause(wctx); cause != nil && (errors.Is(cause, errRenderEnded) || errors.Is(cause, errLeaseLost)) {
		return renders.Stored{}, cause
	}
	if terr := timedOut(); terr != nil {
		return renders.Stored{}, terr
	}
	if err != nil {
		return renders.Stored{}, err
	}
	p, err := s.Media.Probe(tctx, out)
	if terr := timedOut(); terr != nil {
		return renders.Stored{}, terr
	}
	if err != nil {
		return renders.Stored{}, fmt.Errorf("probe chunk %d: %w", c.Window.Index, err)
	}
	if err := checkChunk(p, c.DurationUS(), profile); err != nil {
		return renders.Stored{}, fmt.Errorf("chunk %d: %w", c.Window.Index, err)
	}
	key, err := blob.RenderKey(j.TenantID.String(), j.Key, "chunk-"+strconv.Itoa(c.Window.Index)+"-"+l.Token.String()+".mkv")
	if err != nil {
		return renders.Stored{}, outcome.Permanent("render.bad_key", err)
	}
	f, err := os.Open(out)
	if err != nil {
		return renders.Stored{}, fmt.Errorf("open chunk: %w", err)
	}
	defer f.Close()
	obj, err := s.Blob.Put(wctx, key, f, &blob.PutOpts{ContentType: "video/x-matroska"})
	if cause := context.Cause(wctx); cause != nil && (errors.Is(cause, errRenderEnded) || errors.Is(cause, errLeaseLost)) {
		if err == nil {
			s.remove(ctx, d.Log, key)
		}
		return renders.Stored{}, cause
	}
	if err != nil {
		return renders.Stored{}, fmt.Errorf("store chunk %d: %w", c.Window.Index, err)
	}
	sum, err := hex.DecodeString(obj.SHA256)
	if err != nil {
		return renders.Stored{}, fmt.Errorf("chunk %d sha256 %q: %w", c.Window.Index, obj.SHA256, err)
	}
	d.Log.InfoContext(ctx, "chunk rendered", slog.Int("chunk", c.Window.Index), slog.Int("attempt", l.Attempt),
		slog.Duration("took", time.Since(started)), slog.Int64("bytes", obj.Size))
	return renders.Stored{ObjectKey: key, SizeBytes: obj.Size, SHA256: sum}, nil
}

// errBadChunk marks a chunk ffmpeg wrote that is not what its window
// asked for.
var errBadChunk = errors.New("bad chunk")

// checkChunk refuses a chunk whose streams or duration are not what the
// window asked for: it would not join into the right output.
func checkChunk(p media.Probe, wantUS int64, profile media.Profile) error {
	if p.Video == nil || p.Audio == nil {
		return fmt.Errorf("%w: ffmpeg wrote a chunk without video or sound", errBadChunk)
	}
	if p.Video.Width != profile.Width || p.Video.Height != profile.Height {
		return fmt.Errorf("%w: ffmpeg wrote %dx%d, not the profile's %dx%d", errBadChunk, p.Video.Width, p.Video.Height, profile.Width, profile.Height)
	}
	frame := int64(time.Second/time.Microsecond) / int64(profile.FPS)
	if got := p.Duration.Microseconds(); got < wantUS-frame || got > wantUS+frame {
		return fmt.Errorf("%w: ffmpeg wrote %s of output, not the window's %s (within a frame)", errBadChunk, p.Duration, time.Duration(wantUS)*time.Microsecond)
	}
	return nil
}

// unreachableSigns are what ffmpeg says when it could not read an input
// at all (storage down, refusing, an HTTP error): nothing about the chunk.
var unreachableSigns = []string{"Connection refused", "Connection reset", "Server returned", "timed out", "Failed to resolve hostname",
	"Network is unreachable", "No route to host", "I/O error", "Broken pipe"}

// ownFailure reports whether err says something about the chunk itself,
// and so counts toward its attempts: past its deadline, an ffmpeg or
// ffprobe that ran and refused what it read, a chunk that is not what its
// window asked for, an input no longer usable. A storage or database
// outage, a cut connection or an interrupted run does not count: no
// infrastructure fault may use up a chunk's attempts and fail a render.
func ownFailure(err error) bool {
	var exit *media.ExitError
	switch {
	case strings.HasPrefix(err.Error(), chunkTimeoutCode+":"), errors.Is(err, errBadChunk),
		errors.Is(err, media.ErrInvalidProbe), errors.Is(err, media.ErrNoMediaStreams), errors.Is(err, media.ErrUnsupportedFormat):
		return true
	case errors.As(err, &exit):
		return exit.ExitCode > 0 && !slices.ContainsFunc(unreachableSigns, func(sign string) bool { return strings.Contains(exit.Stderr, sign) })
	}
	return false
}

// remove deletes an object nothing records, best effort: a leftover is
// found by the bucket's lifecycle rule.
func (s *renderer) remove(ctx context.Context, log *slog.Logger, key string) {
	if err := s.Blob.Delete(ctx, key); err != nil {
		log.WarnContext(ctx, "could not remove an unrecorded render object", slog.String("object_key", key), slog.String("error", err.Error()))
	}
}
