package task

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/outbox"
)

// ErrStale: the task was not in the expected state and version any more;
// another delivery changed it first. Re-read and decide.
var ErrStale = errors.New("task changed concurrently (stale version)")

// ErrIllegalTransition: the state machine has no such move.
var ErrIllegalTransition = errors.New("illegal task transition")

// Fields are the columns a transition may set besides status and version.
// A nil pointer leaves the column as it is; Clear* sets it to NULL.
type Fields struct {
	NextRetryAt      *time.Time
	ClearNextRetryAt bool
	NextPollAt       *time.Time
	DeadlineAt       *time.Time
	Progress         *int
	ErrorCode        *string
	ErrorMessage     *string
	Provider         *string
	ProviderJobID    *string
	CancelRequested  *bool
}

// Transition is one move of the state machine.
type Transition struct {
	To     Status
	Reason string // task_events.reason: why, in a few words
	Set    Fields
	// Events are written to the outbox with the transition, after the
	// task.state.changed event Apply adds itself.
	Events []outbox.Event
}

// Apply moves cur (as read in this or an earlier transaction) to tr.To
// through tx: the versioned update, the task_events row, the
// task.state.changed event and tr.Events, all or nothing. It
// returns the task as updated, or [ErrStale] when cur is no longer the
// task's state and version.
func Apply(ctx context.Context, tx pgx.Tx, o Origin, cur Task, tr Transition) (Task, error) {
	if !Legal(cur.Status, tr.To) {
		return Task{}, fmt.Errorf("%w: %s -> %s (task %s)", ErrIllegalTransition, cur.Status, tr.To, cur.ID)
	}
	return apply(ctx, tx, o, cur, tr)
}

// resolutions are the moves a person makes out of NEEDS_ATTENTION, which
// the pipeline itself never leaves: to the provider job they found, or
// back to SUBMITTING once they know the provider made none.
var resolutions = map[Status][]Status{NeedsAttention: {ProviderRunning, Submitting}}

// Resolve is [Apply] for a person's decision on a task in
// NEEDS_ATTENTION (adapter tasks resolve); every other move is refused
// with [ErrIllegalTransition].
func Resolve(ctx context.Context, tx pgx.Tx, o Origin, cur Task, tr Transition) (Task, error) {
	if !slices.Contains(resolutions[cur.Status], tr.To) {
		return Task{}, fmt.Errorf("%w: a person resolves a task from %s, not %s -> %s (task %s)", ErrIllegalTransition, NeedsAttention, cur.Status, tr.To, cur.ID)
	}
	return apply(ctx, tx, o, cur, tr)
}

// apply makes a move the caller checked.
func apply(ctx context.Context, tx pgx.Tx, o Origin, cur Task, tr Transition) (Task, error) {
	set, args := tr.Set.sql([]any{cur.ID, cur.Status, cur.Version, tr.To})
	next, err := scan(tx.QueryRow(ctx, `UPDATE generation_tasks SET status = $4, version = version + 1, updated_at = now()`+set+`
		WHERE task_id = $1 AND status = $2 AND version = $3
		RETURNING `+selectColumns, args...))
	if errors.Is(err, ErrNotFound) {
		return Task{}, fmt.Errorf("%w: task %s is no longer %s at version %d", ErrStale, cur.ID, cur.Status, cur.Version)
	}
	if err != nil {
		return Task{}, fmt.Errorf("transition task %s %s -> %s: %w", cur.ID, cur.Status, tr.To, err)
	}
	if err := record(ctx, tx, o, cur.Status, next, tr.Reason, tr.Events); err != nil {
		return Task{}, err
	}
	return next, nil
}

// record appends the timeline row and writes the state-changed and
// caller's events: what every transition, creation included, does after
// its row is written.
func record(ctx context.Context, tx pgx.Tx, o Origin, from Status, t Task, reason string, events []outbox.Event) error {
	var causedBy *uuid.UUID
	if id, err := uuid.Parse(o.EventID); err == nil {
		causedBy = &id
	}
	var fromStatus *Status
	if from != "" {
		fromStatus = &from
	}
	if _, err := tx.Exec(ctx, `INSERT INTO task_events (task_id, from_status, to_status, version, reason, event_id)
		VALUES ($1, $2, $3, $4, nullif($5, ''), $6)`, t.ID, fromStatus, t.Status, t.Version, reason, causedBy); err != nil {
		return fmt.Errorf("append task event %s v%d: %w", t.ID, t.Version, err)
	}
	change := StateChanged{TaskID: t.ID, TenantID: t.TenantID, From: from, To: t.Status, Version: t.Version,
		Progress: t.Progress, ErrorCode: t.ErrorCode, At: t.UpdatedAt.UTC()}
	changed, err := o.Emit(t, change)
	if err != nil {
		return err
	}
	if err := outbox.Write(ctx, tx, append([]outbox.Event{changed}, events...)...); err != nil {
		return fmt.Errorf("write events of task %s v%d: %w", t.ID, t.Version, err)
	}
	return nil
}

// sql renders the SET clauses of f, numbering parameters after args.
func (f Fields) sql(args []any) (string, []any) {
	var b strings.Builder
	add := func(column string, v any) {
		args = append(args, v)
		b.WriteString(", " + column + " = $" + strconv.Itoa(len(args)))
	}
	if f.NextRetryAt != nil {
		add("next_retry_at", *f.NextRetryAt)
	} else if f.ClearNextRetryAt {
		b.WriteString(", next_retry_at = NULL")
	}
	if f.NextPollAt != nil {
		add("next_poll_at", *f.NextPollAt)
	}
	if f.DeadlineAt != nil {
		add("deadline_at", *f.DeadlineAt)
	}
	if f.Progress != nil {
		add("progress", *f.Progress)
	}
	if f.ErrorCode != nil {
		add("error_code", nullIfEmpty(*f.ErrorCode))
	}
	if f.ErrorMessage != nil {
		add("error_message", nullIfEmpty(*f.ErrorMessage))
	}
	if f.Provider != nil {
		add("provider", *f.Provider)
	}
	if f.ProviderJobID != nil {
		add("provider_job_id", *f.ProviderJobID)
	}
	if f.CancelRequested != nil {
		add("cancel_requested", *f.CancelRequested)
	}
	return b.String(), args
}

// Ptr returns a pointer to v, for [Fields].
func Ptr[T any](v T) *T { return &v }

// Fail moves t to FAILED with an error code and a message a person can act
// on, and asks billing to release its reservation, in tx.
func Fail(ctx context.Context, tx pgx.Tx, o Origin, t Task, code, message string) error {
	settle, err := o.Emit(t, SettleRequested{TaskID: t.ID, Status: Failed})
	if err != nil {
		return err
	}
	_, err = Apply(ctx, tx, o, t, Transition{To: Failed, Reason: code,
		Set: Fields{ErrorCode: &code, ErrorMessage: &message}, Events: []outbox.Event{settle}})
	return err
}

// Touch records that something was done for cur without changing its
// state: a reconciler re-emitting a lost event, say. Like a transition it
// bumps the version, appends a timeline row (from and to the same state)
// and writes the state-changed event and events, so the action is on record
// and any in-flight event that checks the version goes stale.
func Touch(ctx context.Context, tx pgx.Tx, o Origin, cur Task, reason string, events ...outbox.Event) (Task, error) {
	if cur.Status.Terminal() {
		return Task{}, fmt.Errorf("%w: %s is terminal (task %s)", ErrIllegalTransition, cur.Status, cur.ID)
	}
	next, err := scan(tx.QueryRow(ctx, `UPDATE generation_tasks SET version = version + 1, updated_at = now()
		WHERE task_id = $1 AND status = $2 AND version = $3
		RETURNING `+selectColumns, cur.ID, cur.Status, cur.Version))
	if errors.Is(err, ErrNotFound) {
		return Task{}, fmt.Errorf("%w: task %s is no longer %s at version %d", ErrStale, cur.ID, cur.Status, cur.Version)
	}
	if err != nil {
		return Task{}, fmt.Errorf("touch task %s: %w", cur.ID, err)
	}
	if err := record(ctx, tx, o, cur.Status, next, reason, events); err != nil {
		return Task{}, err
	}
	return next, nil
}

// nullIfEmpty stores an empty error code or message as NULL: none.
func nullIfEmpty(v string) *string {
	if v == "" {
		return nil
	}
	return &v
}
