package probe

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// upload probes a tenant's upload: READY with its facts when it is the
// media it declared itself to be, else FAILED with what ffprobe found. A
// video gets a thumbnail.
func (s *prober) upload(ctx context.Context, d stage.Delivery[task.Postprocess]) error {
	req := d.Payload
	if req.Step != catalog.TagProbe {
		return outcome.Permanentf("payload.invalid", "the probe stage handles step %s, not %q", catalog.TagProbe, req.Step)
	}
	a, err := stage.ReadUpload(ctx, s.Pool, d.Env, req.AssetID)
	if err != nil {
		return err
	}
	if a.Status != asset.Processing {
		return d.Noop(ctx)
	}
	url, err := s.Blob.PresignGet(ctx, a.ObjectKey, urlTTL)
	if err != nil {
		return fmt.Errorf("presign upload: %w", err)
	}
	p, err := s.Media.Probe(ctx, url)
	if err == nil {
		err = media.Admit(p)
	}
	code, reason := notDeclared(a, p, err)
	if code == "" && err != nil {
		if missing := stage.SourceMissing(ctx, s.Blob, a.ObjectKey); missing != nil {
			code, reason = "media.source_missing", fmt.Sprintf("the uploaded object of asset %s is no longer in storage", a.ID)
		} else {
			return outcome.Retryable("media.probe_failed", err)
		}
	}
	to := asset.Ready
	if code != "" {
		to = asset.Failed
	}
	return stage.ApplyTo(ctx, d, asset.Upload, a.ID, asset.Guard(asset.Processing).Into(to), func(ctx context.Context, tx pgx.Tx, _ asset.Asset) (aggregate.Result, error) {
		if code != "" {
			return aggregate.Applied, asset.Fail(ctx, tx, a.ID, code, reason)
		}
		if err := asset.RecordProbe(ctx, tx, a.ID, p); err != nil {
			return 0, err
		}
		if err := asset.MarkReady(ctx, tx, a.ID); err != nil {
			return 0, err
		}
		if a.MediaType != asset.Video {
			return aggregate.Applied, nil
		}
		thumb, err := d.Origin.EmitFor(task.Aggregate{Type: task.AssetAggregateType, ID: a.ID, TenantID: a.TenantID},
			task.Postprocess{AssetID: a.ID, Step: catalog.TagThumbnail})
		if err != nil {
			return 0, err
		}
		return aggregate.Applied, outbox.Write(ctx, tx, thumb)
	})
}

// notDeclared says why a probe shows an upload is not the media it
// declared itself to be (a code and a reason a person can act on), or ""
// when it is (or the probe failed for a reason that may pass).
func notDeclared(a asset.Asset, p media.Probe, err error) (code, reason string) {
	if fe := (*media.FormatError)(nil); errors.As(err, &fe) {
		return "asset.unsupported_format", fmt.Sprintf("the uploaded file %q is refused: %s", a.Filename, fe.Reason)
	}
	var exit *media.ExitError
	unplayable := errors.Is(err, media.ErrNoMediaStreams) || errors.Is(err, media.ErrInvalidProbe) ||
		(errors.As(err, &exit) && exit.ExitCode > 0 && !unreadable(exit))
	if err != nil && !unplayable {
		return "", ""
	}
	name := fmt.Sprintf("the uploaded file %q", a.Filename)
	switch a.MediaType {
	case asset.Video:
		if unplayable || p.Video == nil || p.Duration <= 0 {
			return "media.not_a_video", name + " is not a playable video (" + found(p, err) + "); upload an MP4, MOV or WebM file with a video stream"
		}
	case asset.Audio:
		if unplayable || p.Audio == nil || p.Duration <= 0 {
			return "media.not_audio", name + " is not playable audio (" + found(p, err) + "); upload an AAC, MP3, WAV or Opus file"
		}
	case asset.Image:
		if unplayable || p.Video == nil {
			return "media.not_an_image", name + " is not an image (" + found(p, err) + "); upload a PNG, JPEG or WebP file"
		}
	}
	return "", ""
}

// found says what ffprobe saw, for a reason a tenant reads: ffprobe's own
// words about the file, never the storage URL it read it through.
func found(p media.Probe, err error) string {
	var exit *media.ExitError
	switch {
	case errors.As(err, &exit):
		lines := strings.Split(strings.TrimSpace(exit.Stderr), "\n")
		last := lines[len(lines)-1]
		if i := strings.LastIndex(last, ": "); i >= 0 {
			last = last[i+2:] // ffprobe prefixes its input's URL
		}
		if last == "" || strings.Contains(last, "://") {
			return "ffprobe could not read it"
		}
		return "ffprobe: " + last
	case errors.Is(err, media.ErrNoMediaStreams):
		return "no audio or video stream"
	case err != nil:
		return "ffprobe could not make sense of it"
	case p.Video == nil && p.Audio == nil:
		return "no audio or video stream"
	case p.Video == nil:
		return "an audio stream only"
	case p.Audio == nil && p.Duration <= 0:
		return "a still image"
	}
	return "no duration"
}
