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

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/project"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds one chunk's render outside any transaction: its inputs
// presigned, one ffmpeg run under the chunk's deadline beside the watch,
// the result checked with ffprobe and stored under the claim's own key,
// and which of its failures count toward the chunk's attempts.

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
