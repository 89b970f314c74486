package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/attempt"
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
	rows, err := q.Query(ctx, `SELECT version, coalesce(from_status, ''), to_status, coalesce(reason, ''), coalesce(event_id::text, ''), created_at
		FROM (SELECT * FROM task_events WHERE task_id = $1 ORDER BY version DESC LIMIT $2) latest ORDER BY version`, t.ID, timelineLength)
	if err != nil {
		return nil, fmt.Errorf("read timeline of task %s: %w", t.ID, err)
	}
	s.Timeline, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (TimelineEntry, error) {
		var e TimelineEntry
		err := r.Scan(&e.Version, &e.From, &e.To, &e.Reason, &e.EventID, &e.At)
		e.At = e.At.UTC()
		return e, err
	})
	if err != nil {
		return nil, fmt.Errorf("read timeline of task %s: %w", t.ID, err)
	}
	return s, nil
}

// effects reads what was already done for the task: provider attempts,
// assets, the reservation and its ledger rows.
func effects(ctx context.Context, q querier, t task.Task) (Effects, error) {
	e := Effects{Attempts: []Attempt{}, Assets: []Asset{}, Ledger: []LedgerEntry{}}
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

	var res Reservation
	err = q.QueryRow(ctx, `SELECT reservation_id, amount, status, created_at, settled_at FROM credit_reservations WHERE task_id = $1`, t.ID).
		Scan(&res.ReservationID, &res.Amount, &res.Status, &res.CreatedAt, &res.SettledAt)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return Effects{}, fmt.Errorf("read reservation of task %s: %w", t.ID, err)
	default:
		res.CreatedAt, res.SettledAt = res.CreatedAt.UTC(), utc(res.SettledAt)
		e.Reservation = &res
	}

	// Ledger rows of a task are keyed by its reservation (CAPTURE) or by
	// the task itself.
	keys := []string{t.ID.String()}
	if e.Reservation != nil {
		keys = append(keys, e.Reservation.ReservationID.String())
	}
	rows, err = q.Query(ctx, `SELECT entry_id, ledger_business_type, business_id, amount, balance_after, created_at
		FROM credit_ledger WHERE tenant_id = $1 AND business_id = ANY($2::text[]) ORDER BY created_at, entry_id`, t.TenantID, keys)
	if err != nil {
		return Effects{}, fmt.Errorf("read ledger of task %s: %w", t.ID, err)
	}
	e.Ledger, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (LedgerEntry, error) {
		var l LedgerEntry
		err := r.Scan(&l.EntryID, &l.Type, &l.BusinessID, &l.Amount, &l.BalanceAfter, &l.CreatedAt)
		l.CreatedAt = l.CreatedAt.UTC()
		return l, err
	})
	if err != nil {
		return Effects{}, fmt.Errorf("read ledger of task %s: %w", t.ID, err)
	}
	return e, nil
}

// inboxRecord reads the consumer's inbox row for the event; nil when it
// has none.
func inboxRecord(ctx context.Context, q querier, consumer string, eventID uuid.UUID) (*InboxRecord, error) {
	rec := InboxRecord{Consumer: consumer, EventID: eventID.String()}
	err := q.QueryRow(ctx, `SELECT result_code, processed_at FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`,
		consumer, eventID).Scan(&rec.Result, &rec.ProcessedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read inbox of %s: %w", consumer, err)
	}
	rec.ProcessedAt = rec.ProcessedAt.UTC()
	return &rec, nil
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
