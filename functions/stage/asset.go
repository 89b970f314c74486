package stage

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
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

// ReadAsset reads task t's asset. An asset that does not exist or belongs
// to another task is permanent: the event is wrong, not early. One whose
// tenant is not the task's is a security error (seed 7.15.3: the asset's
// tenant is checked, not only its task), quarantined, never auto-fixed.
func ReadAsset(ctx context.Context, q pg.Querier, t task.Task, assetID uuid.UUID) (Asset, error) {
	taskID := t.ID
	var a Asset
	var owner *uuid.UUID
	err := q.QueryRow(ctx, `SELECT asset_id, tenant_id, task_id, kind, object_key, probe IS NOT NULL, audio_codec IS NOT NULL, coalesce(duration_ms, 0)
		FROM assets WHERE asset_id = $1`, assetID).Scan(&a.ID, &a.TenantID, &owner, &a.Kind, &a.ObjectKey, &a.Probed, &a.HasAudio, &a.DurationMS)
	if errors.Is(err, pgx.ErrNoRows) {
		return Asset{}, outcome.Permanentf("asset.not_found", "asset %s does not exist", assetID)
	}
	if err != nil {
		return Asset{}, fmt.Errorf("read asset %s: %w", assetID, err)
	}
	if owner == nil || *owner != taskID {
		return Asset{}, outcome.Permanentf("asset.wrong_task", "asset %s is not an output of task %s", assetID, taskID)
	}
	if a.TenantID != t.TenantID {
		return Asset{}, outcome.Permanentf("security.tenant_mismatch", "asset %s of task %s belongs to tenant %s, not to the task's tenant %s",
			assetID, taskID, a.TenantID, t.TenantID)
	}
	a.TaskID = *owner
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

// ReadUpload reads the uploaded asset an event without a task is about.
// One that does not exist, or that a task owns (its events name the task),
// is permanent; one of another tenant than the event's is a security
// error, quarantined.
func ReadUpload(ctx context.Context, q pg.Querier, ev envelope.Envelope, assetID uuid.UUID) (asset.Asset, error) {
	a, err := asset.Get(ctx, q, assetID)
	if errors.Is(err, asset.ErrNotFound) {
		return asset.Asset{}, outcome.Permanentf("asset.not_found", "asset %s does not exist", assetID)
	}
	if err != nil {
		return asset.Asset{}, err
	}
	if a.TaskID != nil {
		return asset.Asset{}, outcome.Permanentf("payload.invalid", "asset %s is an output of task %s: its events name the task", assetID, *a.TaskID)
	}
	if err := CheckTenant(ev, a.TenantID); err != nil {
		return asset.Asset{}, err
	}
	return a, nil
}
