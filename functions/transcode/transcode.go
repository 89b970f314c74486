// Package transcode is the transcode stage: one derivative of a task's
// output per event (an H.264 proxy of at most 720p, a JPEG thumbnail, a
// waveform PNG), each stored with its checksum as an asset of its own.
//
// The derivative that completes the set moves the task to SUCCEEDED and
// asks billing to capture, unless the task's content review is required
// and not approved yet: then the approval finishes it. The three (and the
// review) run concurrently; each locks the task row before counting
// ([stage.FinishMedia]), so exactly one of them sees the set complete.
// ffmpeg runs before that transaction, never inside it, reading the source
// through a presigned URL and writing to a temporary directory.
//
// A tenant's uploaded video (an event without a task) gets a thumbnail,
// which never holds the upload back.
package transcode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "transcode"

const urlTTL = 30 * time.Minute

// Params are what the stage needs.
type Params struct {
	Pool   *pgxpool.Pool
	Blob   *blob.Store
	Media  *media.Tool
	TmpDir string // where ffmpeg writes; os.TempDir() when empty
	Logger *slog.Logger
}

// derivative is how one step is made and stored.
type derivative struct {
	kind        string // assets.kind, as the catalog says (set on lookup)
	file        string
	contentType string
	make        func(t *media.Tool, ctx context.Context, in, out string) error
}

var derivatives = map[string]derivative{
	catalog.TagTranscodeProxy: {file: "proxy.mp4", contentType: "video/mp4", make: (*media.Tool).ProxyH264},
	catalog.TagThumbnail: {file: "thumbnail.jpg", contentType: "image/jpeg", make: func(t *media.Tool, ctx context.Context, in, out string) error {
		return t.Thumbnail(ctx, in, out, time.Second)
	}},
	catalog.TagWaveform: {file: "waveform.png", contentType: "image/png", make: (*media.Tool).Waveform},
}

type transcoder struct{ Params }

// New returns the transcode function.
func New(p Params) *stage.Function {
	s := &transcoder{Params: p}
	return stage.NewTyped(stage.Typed[task.Postprocess]{Group: catalog.GroupTranscode, DB: p.Pool, Logger: p.Logger, Work: s.work,
		Acts: acts, Untasked: s.upload})
}

// acts reports whether the stage works on t for req: a finished task's
// background retry of a derivative it went without is work too.
func acts(t task.Task, req task.Postprocess) bool {
	return task.PostprocessActs(t) || task.DerivativeRetryActs(t, catalog.DerivativeKind(req.Step))
}

func (s *transcoder) work(ctx context.Context, delivery stage.Delivery[task.Postprocess]) error {
	req, t := delivery.Payload, delivery.Task
	d, ok := derivatives[req.Step]
	d.kind = catalog.DerivativeKind(req.Step)
	if !ok {
		return outcome.Permanentf("payload.invalid", "the transcode stage makes %s, %s and %s, not %q",
			catalog.TagTranscodeProxy, catalog.TagThumbnail, catalog.TagWaveform, req.Step)
	}
	background := task.DerivativeRetryActs(t, d.kind)
	source, err := stage.ReadAsset(ctx, s.Pool, t, req.AssetID)
	if err != nil {
		return err
	}
	exists, err := asset.HasDerivative(ctx, s.Pool, source.ID, asset.Kind(d.kind))
	if err != nil {
		return err
	}
	var obj blob.Object
	if !exists {
		obj, err = s.make(ctx, t, source, d)
		if err != nil && !background {
			if missing := stage.SourceMissing(ctx, s.Blob, source.ObjectKey); missing != nil {
				return delivery.Escalate(ctx, missing)
			}
		}
		var (
			mediaErr *media.ExitError
			deadline *media.DeadlineError
		)
		if err != nil && asset.Kind(d.kind) != asset.KindProxy && (errors.As(err, &mediaErr) || errors.As(err, &deadline)) {
			// An optional derivative ffmpeg cannot make must not hold a
			// paid generation back (docs/operations.md, "Degradation").
			return s.optionalFailed(ctx, delivery, source, d, err, background)
		}
		if err != nil {
			return err
		}
	}
	o := delivery.Origin
	if background {
		return s.storeLate(ctx, delivery, source, d, obj, exists)
	}
	return delivery.Locked(ctx, task.MediaProcessing, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		if !exists {
			if err := addDerivative(ctx, tx, cur.TenantID, &cur.ID, source.ID, d, obj); err != nil {
				return err
			}
		}
		return stage.FinishMedia(ctx, tx, o, cur, source)
	})
}

// make runs ffmpeg for one derivative of a task's output and stores the
// result under the task's deterministic key.
func (s *transcoder) make(ctx context.Context, t task.Task, source stage.Asset, d derivative) (blob.Object, error) {
	key, err := blob.Key(t.TenantID.String(), t.ID.String(), strings.ToLower(d.kind), d.file)
	if err != nil {
		return blob.Object{}, outcome.Permanent("asset.bad_key", err)
	}
	return s.makeTo(ctx, source.ObjectKey, key, d)
}

// makeTo runs ffmpeg for one derivative of the object under sourceKey and
// stores the result under key.
func (s *transcoder) makeTo(ctx context.Context, sourceKey, key string, d derivative) (blob.Object, error) {
	url, err := s.Blob.PresignGet(ctx, sourceKey, urlTTL)
	if err != nil {
		return blob.Object{}, fmt.Errorf("presign source: %w", err)
	}
	dir, err := os.MkdirTemp(s.TmpDir, "transcode-*")
	if err != nil {
		return blob.Object{}, fmt.Errorf("make work directory: %w", err)
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, d.file)
	if err := d.make(s.Media, ctx, url, out); err != nil {
		return blob.Object{}, outcome.Retryable("media."+strings.ToLower(d.kind)+"_failed", err)
	}
	f, err := os.Open(out)
	if err != nil {
		return blob.Object{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return blob.Object{}, err
	}
	obj, err := s.Blob.Put(ctx, key, f, &blob.PutOpts{ContentType: d.contentType, Size: info.Size()})
	if err != nil {
		return blob.Object{}, fmt.Errorf("store %s: %w", strings.ToLower(d.kind), err)
	}
	return obj, nil
}
