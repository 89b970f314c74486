package stage

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outcome"
)

// Asset is the part of an assets row the media stages read.
type Asset struct {
	ID         uuid.UUID
	TenantID   uuid.UUID
	TaskID     uuid.UUID
	Kind       string
	ObjectKey  string
	Probed     bool
	HasAudio   bool
	DurationMS int64
}

// ReadAsset reads a task's asset. An asset that does not exist or belongs
// to another task is permanent: the event is wrong, not early.
func ReadAsset(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, taskID, assetID uuid.UUID) (Asset, error) {
	var a Asset
	var task *uuid.UUID
	err := q.QueryRow(ctx, `SELECT asset_id, tenant_id, task_id, kind, object_key, probe IS NOT NULL, audio_codec IS NOT NULL, coalesce(duration_ms, 0)
		FROM assets WHERE asset_id = $1`, assetID).Scan(&a.ID, &a.TenantID, &task, &a.Kind, &a.ObjectKey, &a.Probed, &a.HasAudio, &a.DurationMS)
	if errors.Is(err, pgx.ErrNoRows) {
		return Asset{}, outcome.Permanentf("asset.not_found", "asset %s does not exist", assetID)
	}
	if err != nil {
		return Asset{}, fmt.Errorf("read asset %s: %w", assetID, err)
	}
	if task == nil || *task != taskID {
		return Asset{}, outcome.Permanentf("asset.wrong_task", "asset %s is not an output of task %s", assetID, taskID)
	}
	a.TaskID = *task
	return a, nil
}

// DerivativeSteps are the derivatives a generated video needs: a proxy and a
// thumbnail always, a waveform only when there is audio to draw.
func DerivativeSteps(hasAudio bool) []string {
	steps := []string{catalog.TagTranscodeProxy, catalog.TagThumbnail}
	if hasAudio {
		steps = append(steps, catalog.TagWaveform)
	}
	return steps
}
