package transcode

import (
	"context"
	"errors"
	"log/slog"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// upload makes the thumbnail of a tenant's uploaded video, READY already:
// the thumbnail decorates the asset and never holds it back, so ffmpeg
// failing on it OptionalTries times ends the step without one.
func (s *transcoder) upload(ctx context.Context, delivery stage.Delivery[task.Postprocess]) error {
	req := delivery.Payload
	if req.Step != catalog.TagThumbnail {
		return outcome.Permanentf("payload.invalid", "an upload gets step %s only, not %q", catalog.TagThumbnail, req.Step)
	}
	a, err := stage.ReadUpload(ctx, s.Pool, delivery.Env, req.AssetID)
	if err != nil {
		return err
	}
	d := derivatives[req.Step]
	d.kind = catalog.DerivativeKind(req.Step)
	have, err := asset.Derivatives(ctx, s.Pool, a.ID)
	if err != nil {
		return err
	}
	if a.Status != asset.Ready || a.MediaType != asset.Video || slices.ContainsFunc(have, func(x asset.Asset) bool { return x.Kind == asset.Kind(d.kind) }) {
		return delivery.Noop(ctx)
	}
	key, err := blob.AssetKey(a.TenantID.String(), a.ID.String(), d.file)
	if err != nil {
		return outcome.Permanent("asset.bad_key", err)
	}
	obj, err := s.makeTo(ctx, a.ObjectKey, key, d)
	var mediaErr *media.ExitError
	if err != nil && errors.As(err, &mediaErr) {
		failures, cerr := s.countFailure(ctx, a.ID, d, err)
		if cerr != nil {
			return cerr
		}
		delivery.Log.WarnContext(ctx, "upload thumbnail failed", slog.Int("failures", failures), slog.String("error", err.Error()))
		if failures < OptionalTries {
			return err
		}
		return delivery.Noop(ctx)
	}
	if err != nil {
		return err
	}
	return delivery.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		return inbox.Applied, addDerivative(ctx, tx, a.TenantID, nil, a.ID, d, obj)
	})
}
