package task

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The writes to generation_tasks that are not transitions: they change no
// state and no version, so they append no timeline row and announce
// nothing. Every other write goes through [Apply], [Touch] or [Create].

// MovePoll moves task id's poll chain from from to to (next_poll_at,
// compare-and-set) while the task is PROVIDER_RUNNING. It reports false
// when the chain was not at from any more: another poll moved it.
func MovePoll(ctx context.Context, tx pgx.Tx, id uuid.UUID, from, to time.Time) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE generation_tasks SET next_poll_at = $3 WHERE task_id = $1 AND status = $4 AND next_poll_at = $2`,
		id, from, to, ProviderRunning)
	if err != nil {
		return false, fmt.Errorf("move poll chain of task %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// RequestCancel records a client's cancel on cur, as read at its state and
// version, with the poll chain moved to pollAt when it is not nil (a
// running job is asked at once). [ErrStale] when cur is no longer the
// task's state and version.
func RequestCancel(ctx context.Context, tx pgx.Tx, cur Task, pollAt *time.Time) error {
	tag, err := tx.Exec(ctx, `UPDATE generation_tasks SET cancel_requested = true, next_poll_at = coalesce($5, next_poll_at), updated_at = now()
		WHERE task_id = $1 AND tenant_id = $2 AND status = $3 AND version = $4`,
		cur.ID, cur.TenantID, cur.Status, cur.Version, pollAt)
	if err != nil {
		return fmt.Errorf("request cancel of task %s: %w", cur.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: task %s is no longer %s at version %d", ErrStale, cur.ID, cur.Status, cur.Version)
	}
	return nil
}

// MarkMissing lists kind among task id's missing optional derivatives
// (once).
func MarkMissing(ctx context.Context, tx pgx.Tx, id uuid.UUID, kind string) error {
	if _, err := tx.Exec(ctx, `UPDATE generation_tasks SET missing_derivatives = array_append(missing_derivatives, $2)
		WHERE task_id = $1 AND NOT ($2 = ANY (missing_derivatives))`, id, kind); err != nil {
		return fmt.Errorf("flag missing %s of task %s: %w", kind, id, err)
	}
	return nil
}

// ClearMissing takes kind off task id's missing derivatives: a background
// retry made it after the task finished.
func ClearMissing(ctx context.Context, tx pgx.Tx, id uuid.UUID, kind string) error {
	if _, err := tx.Exec(ctx, `UPDATE generation_tasks SET missing_derivatives = array_remove(missing_derivatives, $2), updated_at = now()
		WHERE task_id = $1`, id, kind); err != nil {
		return fmt.Errorf("clear missing %s of task %s: %w", kind, id, err)
	}
	return nil
}

// Pace restarts task id's updated_at clock without a transition: what a
// scanner that acted on a finished task uses to act again only after its
// interval.
func Pace(ctx context.Context, tx pgx.Tx, id uuid.UUID) error {
	if _, err := tx.Exec(ctx, `UPDATE generation_tasks SET updated_at = now() WHERE task_id = $1`, id); err != nil {
		return fmt.Errorf("pace task %s: %w", id, err)
	}
	return nil
}
