package render

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/pg"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
)

// This file holds how a render ends outside its join: with the output an
// identical render stored before (reused), SUCCEEDED, or FAILED.

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
	return asset.ReadyRender(ctx, q, j.TenantID, key)
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
	c, _, err := s.applyTo(ctx, d, id, renders.Running().Into(renders.Succeeded), func(ctx context.Context, tx pgx.Tx, cur renders.Job) (aggregate.Result, cleanup, error) {
		if _, err := renders.Apply(ctx, tx, d.Origin, cur, renders.Change{To: renders.Succeeded, OutputAssetID: &output,
			Reused: reused, Progress: task.Ptr(100)}); err != nil {
			return 0, cleanup{}, err
		}
		if reused {
			d.Log.InfoContext(ctx, "render reused a stored output", slog.String("asset_id", output.String()))
			return aggregate.Applied, cleanup{count: []prometheus.Counter{reusedOutputs}}, nil
		}
		return aggregate.Applied, cleanup{}, nil
	})
	if err != nil {
		return err
	}
	s.cleanUp(ctx, d.Log, c)
	return nil
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
