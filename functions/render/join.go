package render

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds the join step: the stored chunks, downloaded and
// checked, concatenated into the output, which is stored and recorded;
// the render and the renders of the same content waiting on the chunks
// end SUCCEEDED with it.

// join concatenates the stored chunks of a running render into its
// output and ends the render SUCCEEDED.
func (s *renderer) join(ctx context.Context, d stage.Delivery[task.RenderRequested], j renders.Job) error {
	if j.Status != renders.Rendering {
		return d.Noop(ctx)
	}
	if done, err := s.reuse(ctx, d, j); done || err != nil {
		return err
	}
	chunks, err := renders.Chunks(ctx, s.Pool, j.TenantID, j.Key)
	if err != nil {
		return err
	}
	if !allDone(chunks) {
		d.Log.WarnContext(ctx, "join asked before every chunk was stored; the last chunk asks again")
		return d.Noop(ctx)
	}
	key, err := outputKey(j)
	if err != nil {
		return err
	}
	dir, err := s.workDir("join")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The parts are read into local files first, each checked against
	// its chunk's checksum: ffmpeg's concat demuxer treats a part it cannot
	// open as the end of the input and exits 0, so joining over URLs while
	// storage restarted wrote a short output, failed as render.bad_output.
	parts := make([]string, len(chunks))
	for i, c := range chunks {
		parts[i] = filepath.Join(dir, fmt.Sprintf("part-%04d.mkv", i))
		if err := s.download(ctx, c, parts[i]); err != nil {
			if missing := s.missingChunks(ctx, chunks); missing > 0 {
				d.Log.WarnContext(ctx, "chunk objects are gone or damaged; they render again", slog.Int("missing", missing))
			}
			return err
		}
	}
	out := filepath.Join(dir, "output.mp4")
	started := time.Now()
	if err := s.Media.Join(ctx, parts, out); err != nil {
		if missing := s.missingChunks(ctx, chunks); missing > 0 {
			d.Log.WarnContext(ctx, "chunk objects are gone; they render again", slog.Int("missing", missing))
			return err
		}
		return err
	}
	p, err := s.Media.Probe(ctx, out)
	if err != nil {
		return fmt.Errorf("probe output: %w", err)
	}
	profile := media.Profiles[j.Profile]
	if err := checkOutput(p, j.DurationUS, profile); err != nil {
		// The chunks made a wrong output: they are dropped, so that the
		// next render of this content renders them again.
		dropped, derr := renders.Drop(ctx, s.Pool, j.TenantID, j.Key)
		if derr != nil {
			return derr
		}
		for _, key := range dropped {
			s.remove(ctx, d.Log, key)
		}
		return s.fail(ctx, d, j.ID, "render.bad_output", err.Error())
	}
	f, err := os.Open(out)
	if err != nil {
		return fmt.Errorf("open output: %w", err)
	}
	defer f.Close()
	obj, err := s.Blob.Put(ctx, key, f, &blob.PutOpts{ContentType: "video/mp4"})
	if err != nil {
		return fmt.Errorf("store output: %w", err)
	}
	sum, err := hex.DecodeString(obj.SHA256)
	if err != nil {
		return fmt.Errorf("output sha256 %q: %w", obj.SHA256, err)
	}
	d.Log.InfoContext(ctx, "render joined", slog.Int("chunks", len(chunks)), slog.Duration("took", time.Since(started)),
		slog.Int64("bytes", obj.Size))
	c, _, err := s.applyTo(ctx, d, j.ID, renders.Guard(), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, cleanup, error) {
		return record(ctx, d, tx, cur, key, sum, obj.Size, p)
	})
	if err != nil {
		return err
	}
	s.cleanUp(ctx, d.Log, c)
	return nil
}

// record records the output stored under key (sum, size bytes, probed p)
// as a RENDER asset, drops the chunks, and ends cur SUCCEEDED with it, and
// the renders of the same content that wait on the chunks too. It leaves
// the chunks' objects to remove, or the output's when cur was canceled
// meanwhile and no render waits on it.
func record(ctx context.Context, d stage.Delivery[task.RenderRequested], tx pgx.Tx, cur renders.Job, key string, sum []byte, size int64,
	p media.Probe,
) (aggregate.Result, cleanup, error) {
	id, recorded, err := asset.StoredAt(ctx, tx, key)
	if err != nil {
		return 0, cleanup{}, err
	}
	// Renders of the same content that waited on these chunks end with
	// this output, also when this one was canceled meanwhile.
	siblings, err := renders.Siblings(ctx, tx, cur)
	if err != nil {
		return 0, cleanup{}, err
	}
	running := cur.Status == renders.Rendering
	if !running && len(siblings) == 0 {
		if recorded {
			return aggregate.Stale, cleanup{}, nil
		}
		return aggregate.Stale, cleanup{remove: []string{key}}, nil // canceled while joining, no sibling waits: no object is left behind
	}
	if !recorded {
		var inserted bool
		id, inserted, err = asset.RecordRender(ctx, tx, asset.NewRender{TenantID: cur.TenantID, ObjectKey: key, SHA256: sum, SizeBytes: size})
		switch {
		case err != nil:
			return 0, cleanup{}, err
		case inserted:
			if err := asset.RecordProbe(ctx, tx, id, p); err != nil {
				return 0, cleanup{}, err
			}
		default:
			// A join of the same content committed the output while
			// this one ran: it is that render's.
			if id, recorded, err = asset.StoredAt(ctx, tx, key); err != nil {
				return 0, cleanup{}, err
			}
			if !recorded {
				return 0, cleanup{}, fmt.Errorf("record render output: %s neither inserted nor found", key)
			}
		}
	}
	joined, err := renders.Drop(ctx, tx, cur.TenantID, cur.Key) // the chunks' objects, dropped with their rows
	if err != nil {
		return 0, cleanup{}, err
	}
	left := cleanup{remove: joined}
	if !running && !recorded {
		// Canceled while it joined, this render recorded the output for
		// the renders that wait on it, and is not charged: the first of
		// them takes the output and pays for it, so that a reused output
		// is free only when the render that recorded it was charged.
		_, _, err := onRunningSibling(ctx, tx, cur, func(ctx context.Context, tx pgx.Tx, payer renders.Job) (aggregate.Result, error) {
			if _, err := renders.Apply(ctx, tx, d.Origin, payer, renders.Change{To: renders.Succeeded, OutputAssetID: &id,
				Progress: task.Ptr(100)}); err != nil {
				return 0, err
			}
			siblings = slices.DeleteFunc(siblings, func(sib renders.Job) bool { return sib.ID == payer.ID })
			return aggregate.Applied, nil
		})
		if err != nil {
			return 0, cleanup{}, err
		}
	}
	var wake []outbox.Event
	for _, sib := range siblings {
		ev, err := sib.Ask(d.Origin, task.RenderJoin, 0)
		if err != nil {
			return 0, cleanup{}, err
		}
		wake = append(wake, ev)
	}
	if !running {
		return aggregate.Applied, left, outbox.Write(ctx, tx, wake...)
	}
	// A render of the same content that joined at the same time and
	// committed first recorded the output and is charged for it: this
	// one ends with that output, reused and free, as if it had found
	// it stored before (the output key is the content's, so both
	// joins wrote the same object).
	if recorded {
		left.count = append(left.count, reusedOutputs)
	}
	if _, err := renders.Apply(ctx, tx, d.Origin, cur, renders.Change{To: renders.Succeeded, OutputAssetID: &id, Reused: recorded,
		Progress: task.Ptr(100)}, wake...); err != nil {
		return 0, cleanup{}, err
	}
	return aggregate.Applied, left, nil
}

// missingChunks forgets the stored chunks whose objects are gone (so that
// the reconciler renders them again) and counts them.
func (s *renderer) missingChunks(ctx context.Context, chunks []renders.Chunk) int {
	missing := 0
	for _, c := range chunks {
		obj, err := s.Blob.Stat(ctx, c.ObjectKey)
		damaged := err == nil && len(c.SHA256) > 0 && obj.SHA256 != "" && obj.SHA256 != hex.EncodeToString(c.SHA256)
		if errors.Is(err, blob.ErrNotFound) || damaged {
			if renders.Forget(ctx, s.Pool, c) == nil {
				missing++
			}
		}
	}
	return missing
}

// checkOutput refuses an output whose streams or duration are not the
// render's: the AAC encoder's priming may add up to a frame of sound.
func checkOutput(p media.Probe, wantUS int64, profile media.Profile) error {
	if p.Video == nil || p.Audio == nil {
		return errors.New("the joined output has no video or no sound")
	}
	if p.Video.Codec != "h264" || p.Audio.Codec != "aac" {
		return fmt.Errorf("the joined output is %s/%s, not h264/aac", p.Video.Codec, p.Audio.Codec)
	}
	if p.Video.Width != profile.Width || p.Video.Height != profile.Height {
		return fmt.Errorf("the joined output is %dx%d, not the profile's %dx%d", p.Video.Width, p.Video.Height, profile.Width, profile.Height)
	}
	frame := int64(time.Second/time.Microsecond) / int64(profile.FPS)
	if got := p.Duration.Microseconds(); got < wantUS-frame || got > wantUS+2*frame {
		return fmt.Errorf("the joined output lasts %s, not the timeline's %s", p.Duration, time.Duration(wantUS)*time.Microsecond)
	}
	return nil
}

// errDamagedChunk: a chunk's object is not the bytes its row recorded.
var errDamagedChunk = errors.New("chunk object does not match its checksum")

// download reads chunk c's object into path and checks it against the
// checksum its row recorded. A failure is an outage to retry, unless the
// object is gone or damaged (missingChunks then has it rendered again).
func (s *renderer) download(ctx context.Context, c renders.Chunk, path string) error {
	body, _, err := s.Blob.Open(ctx, c.ObjectKey)
	if err != nil {
		return fmt.Errorf("read chunk %d: %w", c.Window.Index, err)
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write chunk %d: %w", c.Window.Index, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(f, h), body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("read chunk %d: %w", c.Window.Index, err)
	}
	if len(c.SHA256) > 0 && !bytes.Equal(h.Sum(nil), c.SHA256) {
		return fmt.Errorf("read chunk %d: %w", c.Window.Index, errDamagedChunk)
	}
	return nil
}
