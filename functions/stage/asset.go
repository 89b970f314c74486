package stage

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// Asset is a task's output as the media stages read it: an [asset.Asset]
// that [ReadAsset] found to be the task's, of the task's tenant.
type Asset struct {
	asset.Asset
	// DurationMS is the probed duration, 0 before the probe (the
	// embedded asset's is nil then): what a frame offset is computed from.
	DurationMS int64
}

// ReadAsset reads task t's asset. An asset that does not exist or belongs
// to another task is permanent: the event is wrong, not early. One whose
// tenant is not the task's is a security error (seed 7.15.3: the asset's
// tenant is checked, not only its task), quarantined, never auto-fixed.
func ReadAsset(ctx context.Context, q pg.Querier, t task.Task, assetID uuid.UUID) (Asset, error) {
	taskID := t.ID
	a, err := asset.Get(ctx, q, assetID)
	if errors.Is(err, asset.ErrNotFound) {
		return Asset{}, outcome.Permanentf("asset.not_found", "asset %s does not exist", assetID)
	}
	if err != nil {
		return Asset{}, err
	}
	if a.TaskID == nil || *a.TaskID != taskID {
		return Asset{}, outcome.Permanentf("asset.wrong_task", "asset %s is not an output of task %s", assetID, taskID)
	}
	if a.TenantID != t.TenantID {
		return Asset{}, outcome.Permanentf("security.tenant_mismatch", "asset %s of task %s belongs to tenant %s, not to the task's tenant %s",
			assetID, taskID, a.TenantID, t.TenantID)
	}
	out := Asset{Asset: a}
	if a.DurationMS != nil {
		out.DurationMS = *a.DurationMS
	}
	return out, nil
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
