package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/task"
)

// timelineLength is how many of the latest transitions a report shows.
const timelineLength = 10

// taskState reads the task's state view with its latest transitions.
func taskState(ctx context.Context, q querier, t task.Task) (*TaskState, error) {
	s := &TaskState{
		TaskID: t.ID, TenantID: t.TenantID, Status: string(t.Status), Version: t.Version, Progress: t.Progress,
		CancelRequested: t.CancelRequested, Provider: t.Provider, ProviderJobID: t.ProviderJobID,
		NextRetryAt: utc(t.NextRetryAt), NextPollAt: utc(t.NextPollAt), ErrorCode: t.ErrorCode, UpdatedAt: t.UpdatedAt.UTC(),
	}
	var err error
	s.Timeline, err = task.Timeline(ctx, q, t.ID, timelineLength)
	return s, err
}

// effects reads what was already done for the task: provider attempts,
// assets, the reservation and its ledger rows.
func effects(ctx context.Context, q querier, t task.Task) (Effects, error) {
	e := Effects{Attempts: []Attempt{}}
	attempts, err := attempt.List(ctx, q, t.ID)
	if err != nil {
		return Effects{}, err
	}
	for _, a := range attempts {
		e.Attempts = append(e.Attempts, Attempt{AttemptNo: a.No, AttemptID: a.ID, Status: string(a.Status), Provider: a.Provider,
			ProviderJobID: a.ProviderJobID, IdempotencyKey: a.IdempotencyKey, ErrorCode: a.ErrorCode, CreatedAt: a.CreatedAt.UTC(), ResponseAt: utc(a.ResponseAt)})
	}

	rows, err := q.Query(ctx, `SELECT asset_id, kind, object_key, size_bytes, source_asset_id, created_at
		FROM assets WHERE task_id = $1 ORDER BY created_at, asset_id`, t.ID)
	if err != nil {
		return Effects{}, fmt.Errorf("read assets of task %s: %w", t.ID, err)
	}
	e.Assets, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Asset, error) {
		var a Asset
		err := r.Scan(&a.AssetID, &a.Kind, &a.ObjectKey, &a.SizeBytes, &a.SourceAssetID, &a.CreatedAt)
		a.CreatedAt = a.CreatedAt.UTC()
		return a, err
	})
	if err != nil {
		return Effects{}, fmt.Errorf("read assets of task %s: %w", t.ID, err)
	}
	if e.Reservation, e.Ledger, err = billing.OfTask(ctx, q, t.TenantID, t.ID); err != nil {
		return Effects{}, err
	}
	return e, nil
}

// priors reads the other replays of the event to the consumer.
func priors(ctx context.Context, q querier, consumer string, eventID, self uuid.UUID) ([]Prior, error) {
	rows, err := q.Query(ctx, `SELECT replay_id, status, coalesce(replay_event_id::text, ''), ticket, operator, created_at
		FROM message_replays WHERE original_event_id = $1 AND consumer_name = $2 AND replay_id <> $3
		ORDER BY created_at, replay_id`, eventID, consumer, self)
	if err != nil {
		return nil, fmt.Errorf("read earlier replays: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Prior, error) {
		var p Prior
		err := r.Scan(&p.ReplayID, &p.Status, &p.ReplayEventID, &p.Ticket, &p.Operator, &p.CreatedAt)
		p.CreatedAt = p.CreatedAt.UTC()
		return p, err
	})
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
