// Package review is the record of the optional content review of a task's
// output (seed 7.8.3; docs/journey.md, "Content review"): the task_reviews row the
// probe writes when review is required for the task, the review stage
// updates with each call's outcome, the step that completes the task reads
// under the task's row lock, and the API shows.
//
// Whether review is required is decided once, by the row's existence: the
// probe writes it in the transaction that emits the REVIEW step. The
// review switch (REVIEW_URL) changing later changes nothing for the task.
package review

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
)

// Status is a review's state (task_reviews.status).
type Status string

// The states of a review.
const (
	// Pending: asked, no answer recorded yet.
	Pending Status = "PENDING"
	// Waiting: the reviewer was unavailable; a delayed REVIEW is due at
	// NextAttemptAt.
	Waiting Status = "WAITING"
	// Approved: the task may finish.
	Approved Status = "APPROVED"
	// Rejected: the task FAILED with review.content_rejected.
	Rejected Status = "REJECTED"
	// Unavailable: the reviewer stayed unavailable past REVIEW_MAX_WAIT;
	// the task waits for a person in NEEDS_ATTENTION.
	Unavailable Status = "UNAVAILABLE"
)

// Open reports whether the review still waits for a decision.
func (s Status) Open() bool { return s == Pending || s == Waiting }

// ErrNotFound: the task has no review row, so review is not required.
var ErrNotFound = errors.New("task has no content review")

// Review is one task_reviews row.
type Review struct {
	TaskID        uuid.UUID
	TenantID      uuid.UUID
	AssetID       uuid.UUID
	Status        Status
	Decision      string
	ReasonCode    string
	Labels        []string
	Reviewer      string
	Attempts      int
	Malformed     int
	LastError     string
	RequestedAt   time.Time
	WaitingSince  *time.Time
	NextAttemptAt time.Time
	DecidedAt     *time.Time
	UpdatedAt     time.Time
}

const columns = `task_id, tenant_id, asset_id, status, coalesce(decision, ''), coalesce(reason_code, ''), labels,
	coalesce(reviewer, ''), attempts, malformed, coalesce(last_error, ''), requested_at, waiting_since, next_attempt_at,
	decided_at, updated_at`

func scan(row pgx.Row) (Review, error) {
	var r Review
	err := row.Scan(&r.TaskID, &r.TenantID, &r.AssetID, &r.Status, &r.Decision, &r.ReasonCode, &r.Labels,
		&r.Reviewer, &r.Attempts, &r.Malformed, &r.LastError, &r.RequestedAt, &r.WaitingSince, &r.NextAttemptAt,
		&r.DecidedAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Review{}, ErrNotFound
	}
	if err != nil {
		return Review{}, fmt.Errorf("read content review: %w", err)
	}
	return r, nil
}

// Get reads the review of task id; [ErrNotFound] when review is not
// required for it.
func Get(ctx context.Context, q pg.Querier, id uuid.UUID) (Review, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM task_reviews WHERE task_id = $1`, id))
}

// Lock reads the review of task id and locks its row until tx ends.
func Lock(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Review, error) {
	return scan(tx.QueryRow(ctx, `SELECT `+columns+` FROM task_reviews WHERE task_id = $1 FOR UPDATE`, id))
}

// Require records, in the probe's transaction, that the task's output
// must be reviewed before the task may finish. A second call (the probe
// redelivered, or re-emitted by the reconciler) keeps the first row.
func Require(ctx context.Context, q pg.Querier, taskID, tenantID, assetID uuid.UUID) error {
	_, err := q.Exec(ctx, `INSERT INTO task_reviews (task_id, tenant_id, asset_id) VALUES ($1, $2, $3) ON CONFLICT (task_id) DO NOTHING`,
		taskID, tenantID, assetID)
	if err != nil {
		return fmt.Errorf("require content review of task %s: %w", taskID, err)
	}
	return nil
}

// Blocks reports whether task id may not finish yet because its review is
// required and not approved. Call it under the task's row lock: with the
// review stage's approval taking the same lock, exactly one of the last
// derivative and the approval sees the task complete.
func Blocks(ctx context.Context, q pg.Querier, id uuid.UUID) (bool, error) {
	var st Status
	err := q.QueryRow(ctx, `SELECT status FROM task_reviews WHERE task_id = $1`, id).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read content review of task %s: %w", id, err)
	}
	return st != Approved, nil
}

// Decision is a reviewer's answer.
type Decision struct {
	Approve    bool
	ReasonCode string
	Labels     []string
	Reviewer   string
}

// Decide records the reviewer's decision on a review that was open after
// attempts calls; false when it was decided or superseded meanwhile.
func Decide(ctx context.Context, tx pgx.Tx, id uuid.UUID, attempts int, d Decision) (bool, error) {
	status, decision := Rejected, "reject"
	if d.Approve {
		status, decision = Approved, "approve"
	}
	labels := d.Labels
	if labels == nil {
		labels = []string{}
	}
	tag, err := tx.Exec(ctx, `UPDATE task_reviews SET status = $3, decision = $4, reason_code = nullif($5, ''), labels = $6,
			reviewer = nullif($7, ''), attempts = attempts + 1, decided_at = now(), updated_at = now()
		WHERE task_id = $1 AND attempts = $2 AND status IN ('PENDING', 'WAITING')`,
		id, attempts, status, decision, d.ReasonCode, labels, d.Reviewer)
	if err != nil {
		return false, fmt.Errorf("record content review decision of task %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Unreachable is a call that brought no decision.
type Unreachable struct {
	Error     string
	Malformed bool      // the reviewer answered, but not a decision
	Next      time.Time // when the delayed REVIEW is due
}

// Wait records a call after attempts that brought no decision, and that
// the next is due at u.Next; false when the review was decided or
// superseded meanwhile.
func Wait(ctx context.Context, tx pgx.Tx, id uuid.UUID, attempts int, u Unreachable) (bool, error) {
	malformed := 0
	if u.Malformed {
		malformed = 1
	}
	tag, err := tx.Exec(ctx, `UPDATE task_reviews SET status = 'WAITING', attempts = attempts + 1, malformed = malformed + $3,
			last_error = $4, waiting_since = coalesce(waiting_since, now()), next_attempt_at = $5, updated_at = now()
		WHERE task_id = $1 AND attempts = $2 AND status IN ('PENDING', 'WAITING')`,
		id, attempts, malformed, truncate(u.Error, 2000), u.Next)
	if err != nil {
		return false, fmt.Errorf("record content review wait of task %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// GiveUp records that the reviewer stayed unavailable past the wait's
// maximum; false when the review was decided or superseded meanwhile.
func GiveUp(ctx context.Context, tx pgx.Tx, id uuid.UUID, attempts int, lastError string) (bool, error) {
	tag, err := tx.Exec(ctx, `UPDATE task_reviews SET status = 'UNAVAILABLE', attempts = attempts + 1, last_error = $3,
			waiting_since = coalesce(waiting_since, now()), updated_at = now()
		WHERE task_id = $1 AND attempts = $2 AND status IN ('PENDING', 'WAITING')`, id, attempts, truncate(lastError, 2000))
	if err != nil {
		return false, fmt.Errorf("record content review given up of task %s: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// Overdue reads, for the reconciler, the review of task id when it is open
// and its next call was due before before: the REVIEW that was to make it
// is lost (with a broker), and must be sent again.
func Overdue(ctx context.Context, q pg.Querier, id uuid.UUID, before time.Time) (Review, bool, error) {
	r, err := scan(q.QueryRow(ctx, `SELECT `+columns+` FROM task_reviews
		WHERE task_id = $1 AND status IN ('PENDING', 'WAITING') AND next_attempt_at < $2`, id, before))
	if errors.Is(err, ErrNotFound) {
		return Review{}, false, nil
	}
	return r, err == nil, err
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
