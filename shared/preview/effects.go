package preview

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// Effects are the side effects already done for the task, and whether the
// consumer already processed the quarantined event.
type Effects struct {
	Attempts    []Attempt             `json:"attempts"`
	Assets      []Asset               `json:"assets"`
	Reservation *billing.Reservation  `json:"reservation,omitempty"`
	Ledger      []billing.LedgerEntry `json:"ledger"`
	// Inbox is the consumer's inbox_dedup row for the original event; nil
	// when the consumer never committed it.
	Inbox *inbox.Record `json:"inbox,omitempty"`
}

// Attempt is a task_attempts row: one submission to a provider.
type Attempt struct {
	AttemptNo      int        `json:"attempt_no"`
	AttemptID      uuid.UUID  `json:"attempt_id"`
	Status         string     `json:"status"`
	Provider       string     `json:"provider"`
	ProviderJobID  string     `json:"provider_job_id,omitempty"` // the remote job
	IdempotencyKey string     `json:"provider_idempotency_key"`
	ErrorCode      string     `json:"error_code,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	ResponseAt     *time.Time `json:"response_at,omitempty"`
}

// Asset is an asset of the task as a report shows it: the part of an
// [asset.Asset] the rules read, under the report's JSON names.
type Asset struct {
	AssetID       uuid.UUID  `json:"asset_id"`
	Kind          string     `json:"kind"`
	ObjectKey     string     `json:"object_key"`
	SizeBytes     int64      `json:"size_bytes"`
	SourceAssetID *uuid.UUID `json:"source_asset_id,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
}

func assetOf(a asset.Asset) Asset {
	return Asset{AssetID: a.ID, Kind: string(a.Kind), ObjectKey: a.ObjectKey, SizeBytes: a.SizeBytes, SourceAssetID: a.SourceAssetID, CreatedAt: a.CreatedAt}
}

// Asset finds one of the task's assets.
func (e Effects) Asset(id uuid.UUID) (Asset, bool) {
	for _, a := range e.Assets {
		if a.AssetID == id {
			return a, true
		}
	}
	return Asset{}, false
}

// ReadEffects reads what was already done for t: provider attempts,
// assets, the reservation and its ledger rows. Inbox is left for the
// caller, who knows the consumer and the event.
func ReadEffects(ctx context.Context, q pg.Querier, t task.Task) (Effects, error) {
	e := Effects{Attempts: []Attempt{}}
	attempts, err := attempt.List(ctx, q, t.ID)
	if err != nil {
		return Effects{}, err
	}
	for _, a := range attempts {
		e.Attempts = append(e.Attempts, Attempt{AttemptNo: a.No, AttemptID: a.ID, Status: string(a.Status), Provider: a.Provider,
			ProviderJobID: a.ProviderJobID, IdempotencyKey: a.IdempotencyKey, ErrorCode: a.ErrorCode, CreatedAt: a.CreatedAt.UTC(), ResponseAt: pg.UTC(a.ResponseAt)})
	}

	assets, err := asset.OfTask(ctx, q, t.ID)
	if err != nil {
		return Effects{}, err
	}
	e.Assets = make([]Asset, len(assets))
	for i, a := range assets {
		e.Assets[i] = assetOf(a)
	}
	if e.Reservation, e.Ledger, err = billing.OfTask(ctx, q, t.TenantID, t.ID); err != nil {
		return Effects{}, err
	}
	return e, nil
}
