package transcode

import (
	"context"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// OptionalTries is how many ffmpeg failures of a thumbnail or waveform the
// task waits through before it finishes without it.
const OptionalTries = 3

// optionalFailed records an ffmpeg failure of an optional derivative.
// Below OptionalTries it is returned (the adapter retries); at
// OptionalTries the kind is listed in missing_derivatives and the task may
// finish without it. A background retry's failure is only recorded: the
// reconciler tries again later.
func (s *transcoder) optionalFailed(ctx context.Context, delivery stage.Delivery[task.Postprocess], source stage.Asset, d derivative, cause error, background bool) error {
	t := delivery.Task
	failures, err := s.countFailure(ctx, source.ID, d, cause)
	if err != nil {
		return err
	}
	delivery.Log.WarnContext(ctx, "optional derivative failed", slog.String("kind", d.kind),
		slog.Int("failures", failures), slog.Bool("background", background), slog.String("error", cause.Error()))
	if background {
		return delivery.Noop(ctx)
	}
	if failures < OptionalTries {
		return cause
	}
	o := delivery.Origin
	return delivery.Locked(ctx, task.MediaProcessing, func(ctx context.Context, tx pgx.Tx, cur task.Task) error {
		if err := task.MarkMissing(ctx, tx, cur.ID, d.kind); err != nil {
			return err
		}
		// Read the row again: FinishMedia counts the kind just flagged missing.
		cur, err := task.Lock(ctx, tx, t.ID)
		if err != nil {
			return err
		}
		return stage.FinishMedia(ctx, tx, o, cur, source)
	})
}

// storeLate records a derivative made by a background retry for a task
// that already finished without it.
func (s *transcoder) storeLate(ctx context.Context, delivery stage.Delivery[task.Postprocess], source stage.Asset, d derivative, obj blob.Object, exists bool) error {
	t := delivery.Task
	return delivery.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		if !exists {
			if err := addDerivative(ctx, tx, t.TenantID, &t.ID, source.ID, d, obj); err != nil {
				return "", err
			}
		}
		// Not a transition: the task stays finished; only the flag goes.
		return inbox.Applied, task.ClearMissing(ctx, tx, t.ID, d.kind)
	})
}

// countFailure counts one more ffmpeg failure of making d from source, and
// returns how many there were.
func (s *transcoder) countFailure(ctx context.Context, sourceID uuid.UUID, d derivative, cause error) (int, error) {
	var failures int
	err := s.Pool.QueryRow(ctx, `INSERT INTO derivative_failures (source_asset_id, kind, failures, last_error) VALUES ($1, $2, 1, $3)
		ON CONFLICT (source_asset_id, kind) DO UPDATE SET failures = derivative_failures.failures + 1, last_error = excluded.last_error, updated_at = now()
		RETURNING failures`, sourceID, d.kind, truncate(cause.Error(), 2000)).Scan(&failures)
	if err != nil {
		return 0, fmt.Errorf("record %s failure: %w", strings.ToLower(d.kind), err)
	}
	return failures, nil
}

// addDerivative records the stored derivative d of source.
func addDerivative(ctx context.Context, q pg.Querier, tenantID uuid.UUID, taskID *uuid.UUID, sourceID uuid.UUID, d derivative, obj blob.Object) error {
	sum, err := hex.DecodeString(obj.SHA256)
	if err != nil || len(sum) != 32 {
		return fmt.Errorf("stored %s has no usable sha256", obj.Key)
	}
	_, err = asset.AddDerivative(ctx, q, asset.NewDerivative{TenantID: tenantID, TaskID: taskID, SourceID: sourceID, Kind: asset.Kind(d.kind),
		ObjectKey: obj.Key, SHA256: sum, SizeBytes: obj.Size, ContentType: d.contentType})
	return err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
