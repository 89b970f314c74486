package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// uncurable marks a failure no retry can cure for the task it is about.
type uncurable struct{ error }

func (u uncurable) Unwrap() error { return u.error }

// Uncurable marks err as a failure that no delivery can cure for its task
// (a source object gone from storage, say): [Escalate] hands the task to a
// person with code and err's message instead of retrying. It is permanent.
func Uncurable(code string, err error) error {
	return uncurable{outcome.Permanent(code, err)}
}

// IsUncurable reports whether err is [Uncurable], or a PostgreSQL unique
// violation: a business key another row already holds, which the same
// delivery would hit every time.
func IsUncurable(err error) bool {
	var u uncurable
	if errors.As(err, &u) {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation
}

// Escalate answers ev for consumer when err is [IsUncurable]: task id goes
// to NEEDS_ATTENTION with err's code and message, in ev's inbox-protected
// transaction, and Escalate returns nil (the task, not the quarantine,
// holds the reason; a redelivery is a duplicate). A task that is terminal
// already is left as it is. Any other err is returned unchanged, nil
// included.
func Escalate(ctx context.Context, db inbox.TxBeginner, consumer string, ev envelope.Envelope, o task.Origin, id uuid.UUID, err error, log *slog.Logger) error {
	if err == nil || !IsUncurable(err) {
		return err
	}
	code, message := attentionReason(err)
	_, ierr := inbox.Do(ctx, db, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		return escalateTx(ctx, tx, o, id, code, message)
	})
	return escalated(ctx, id, code, message, ierr, log)
}

// escalation is the move of a task to NEEDS_ATTENTION, which holds
// while the task, as locked, is not terminal.
var escalation = aggregate.Transition[task.Status, task.Task]{
	If: func(cur task.Task) bool { return !cur.Status.Terminal() },
	To: task.NeedsAttention,
}

// escalateTx moves task id to NEEDS_ATTENTION in tx, unless it is
// terminal already.
func escalateTx(ctx context.Context, tx pgx.Tx, o task.Origin, id uuid.UUID, code, message string) (inbox.Result, error) {
	res, err := aggregate.Apply(ctx, tx, task.Kind, id, escalation, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		_, err := task.Apply(ctx, tx, o, cur, task.Transition{To: task.NeedsAttention, Reason: code,
			Set: task.Fields{ErrorCode: &code, ErrorMessage: &message}})
		return aggregate.Applied, err
	})
	if err != nil {
		return "", err
	}
	return inboxResult(res), nil
}

// escalated reports the outcome of an escalation.
func escalated(ctx context.Context, id uuid.UUID, code, message string, ierr error, log *slog.Logger) error {
	if ierr != nil {
		return fmt.Errorf("hand task %s to a person after %s: %w", id, code, ierr)
	}
	log.WarnContext(ctx, "task needs attention", slog.String("task_id", id.String()), slog.String("error_code", code), slog.String("error", message))
	return nil
}

// SourceMissing tells, after a media step failed on the object at key, a
// failure no retry can cure from one worth retrying: an [Uncurable] error
// when the object is gone from storage, nil otherwise (including when
// storage cannot be asked now).
func SourceMissing(ctx context.Context, store *blob.Store, key string) error {
	if _, err := store.Stat(ctx, key); errors.Is(err, blob.ErrNotFound) {
		return Uncurable("media.source_missing", fmt.Errorf("the task's output %s is no longer in storage, so no media step can read it; "+
			"restore the object and replay, or fail the task", key))
	}
	return nil
}

// attentionReason is the error code and message an uncurable err leaves
// on its task.
func attentionReason(err error) (code, message string) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &uncurable{}) && errors.As(err, &pgErr) {
		return "db.unique_violation", fmt.Sprintf("%s is already held by another row (%s); retrying cannot change that, so a person decides: %s",
			pgErr.ConstraintName, pgErr.Detail, err.Error())
	}
	_, code = outcome.Of(err)
	return code, err.Error()
}
