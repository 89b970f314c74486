// Package probe is the probe stage: ffprobe on a task's stored output,
// its duration, codecs, resolution and bitrate recorded on the asset, and
// the derivative steps requested; and on a tenant's upload (an event
// without a task), which becomes READY when it is the media it declared,
// or FAILED with what ffprobe found.
//
// ffprobe reads the object through a short-lived presigned URL, so nothing
// is copied to local disk. An output that is not a playable video fails the
// task with that reason (the reservation is released); a probe that could
// not run (timeout, storage unreachable) is retried.
//
// With content review on (REVIEW_URL set: [Params.Review]) the probe also
// asks for the REVIEW step, and records in the same transaction that the
// task needs an approval before it may finish (shared/review): decided
// once, here, so that turning review on or off later neither strands nor
// skips a task already past its probe.
package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "probe"

// urlTTL bounds the presigned URL ffprobe reads through.
const urlTTL = 15 * time.Minute

// Params are what the stage needs.
type Params struct {
	Pool  *pgxpool.Pool
	Blob  *blob.Store
	Media *media.Tool
	// Review: each task probed from now on needs a content review's
	// approval before it may finish.
	Review bool
	Logger *slog.Logger
}

type prober struct{ Params }

// New returns the probe function.
func New(p Params) *stage.Function {
	s := &prober{Params: p}
	return stage.NewTyped(stage.Typed[task.Postprocess]{Group: catalog.GroupProbe, DB: p.Pool, Logger: p.Logger, Work: s.work,
		Acts:     func(t task.Task, _ task.Postprocess) bool { return task.PostprocessActs(t) },
		Untasked: s.upload})
}

func (s *prober) work(ctx context.Context, d stage.Delivery[task.Postprocess]) error {
	req, t, o := d.Payload, d.Task, d.Origin
	if req.Step != catalog.TagProbe {
		return outcome.Permanentf("payload.invalid", "the probe stage handles step %s, not %q", catalog.TagProbe, req.Step)
	}
	out, err := stage.ReadAsset(ctx, s.Pool, t, req.AssetID)
	if err != nil {
		return err
	}

	var probe *media.Probe
	if !out.Probed {
		url, err := s.Blob.PresignGet(ctx, out.ObjectKey, urlTTL)
		if err != nil {
			return fmt.Errorf("presign output: %w", err)
		}
		p, err := s.Media.Probe(ctx, url)
		if err == nil {
			err = media.Admit(p)
		}
		if reason := notAVideo(p, err); reason != "" {
			return d.Locked(ctx, task.MediaProcessing, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
				if err := settleAsset(asset.Fail(ctx, tx, out.ID, "media.not_a_video", reason)); err != nil {
					return err
				}
				return task.Fail(ctx, tx, o, cur, "media.not_a_video", reason)
			})
		}
		if err != nil {
			if missing := stage.SourceMissing(ctx, s.Blob, out.ObjectKey); missing != nil {
				return d.Escalate(ctx, missing)
			}
			return outcome.Retryable("media.probe_failed", err)
		}
		probe = &p
	}
	return d.Locked(ctx, task.MediaProcessing, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		if probe != nil {
			if err := asset.RecordProbe(ctx, tx, out.ID, *probe); err != nil {
				return err
			}
			if err := settleAsset(asset.MarkReady(ctx, tx, out.ID)); err != nil {
				return err
			}
		}
		a, err := stage.ReadAsset(ctx, tx, t, req.AssetID)
		if err != nil {
			return err
		}
		var events []outbox.Event
		for _, step := range stage.DerivativeSteps(a.HasAudio) {
			e, err := o.Emit(cur, task.Postprocess{TaskID: cur.ID, AssetID: a.ID, Step: step})
			if err != nil {
				return err
			}
			events = append(events, e)
		}
		e, required, err := s.review(ctx, tx, o, cur, a.ID)
		if err != nil {
			return err
		}
		if required {
			events = append(events, e)
		}
		return outbox.Write(ctx, tx, events...)
	})
}

// review records, when review is on, that cur needs a content review, and
// returns the REVIEW step of a task that needs one: also when review was on
// for an earlier probe of the task and is off now (a probe re-emitted by
// the reconciler), since the task waits for that approval.
func (s *prober) review(ctx context.Context, tx pgx.Tx, o task.Origin, cur task.Task, assetID uuid.UUID) (outbox.Event, bool, error) {
	if s.Review {
		if err := review.Require(ctx, tx, cur.ID, cur.TenantID, assetID); err != nil {
			return outbox.Event{}, false, err
		}
	}
	r, err := review.Get(ctx, tx, cur.ID)
	if errors.Is(err, review.ErrNotFound) {
		return outbox.Event{}, false, nil
	}
	if err != nil {
		return outbox.Event{}, false, err
	}
	if !r.Status.Open() {
		return outbox.Event{}, false, nil
	}
	e, err := o.Emit(cur, task.Postprocess{TaskID: cur.ID, AssetID: assetID, Step: catalog.TagReview,
		Wait: task.Wait{RetryAttempt: r.Attempts}})
	return e, err == nil, err
}

// settleAsset passes the error of an asset's status move on, except that
// the asset had moved already (a redelivery, or an output stored before
// assets had a status).
func settleAsset(err error) error {
	if errors.Is(err, asset.ErrStale) {
		return nil
	}
	return err
}

// notAVideo says why a probe shows the output cannot be a video, or "" when
// it can (or the probe failed for a reason that may pass).
func notAVideo(p media.Probe, err error) string {
	var (
		exit *media.ExitError
		fe   *media.FormatError
	)
	switch {
	case errors.As(err, &fe):
		return "the provider's output is refused: " + fe.Reason
	case errors.Is(err, media.ErrNoMediaStreams), errors.Is(err, media.ErrInvalidProbe):
		return "the provider's output is not a playable video (" + found(p, err) + ")"
	case errors.As(err, &exit) && exit.ExitCode > 0 && !unreadable(exit):
		return "the provider's output is not a playable video (" + found(p, err) + ")"
	case err == nil && p.Video == nil:
		return "the provider's output has no video stream"
	}
	return ""
}

// unreadableSigns are what ffprobe says when it could not read the
// presigned URL at all: storage down or refusing connections, or an HTTP
// error status. ffprobe exits 1 for these exactly as for bytes that are no
// video, so without this check a storage outage failed paid generations as
// "not a playable video" instead of retrying the probe.
var unreadableSigns = []string{
	"Server returned", // any HTTP error status: 5XX, 403 (signature), 404
	"Connection refused",
	"Connection reset",
	"timed out",
	"Failed to resolve hostname",
	"Network is unreachable",
	"No route to host",
	"I/O error",
}

// unreadable reports whether ffprobe failed reading its input rather than
// on what it read.
func unreadable(e *media.ExitError) bool {
	return slices.ContainsFunc(unreadableSigns, func(sign string) bool { return strings.Contains(e.Stderr, sign) })
}
