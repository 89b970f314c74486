// Package attempt owns task_attempts: every submission of a task to a
// provider, committed before the provider is called (seed 7.6.4). It is
// the one place that reads and writes the table, with its statuses typed.
//
// An attempt is opened SUBMITTING, with a provider idempotency key and a
// client request id of its own; the provider's answer makes it ACCEPTED
// (with the job id), REJECTED, or SUBMIT_UNKNOWN when the answer was lost;
// the reconciler finds the job (ACCEPTED) or reopens it (SUBMITTING); the
// job's end makes it SUCCEEDED, FAILED or CANCELED. An attempt known to
// have created no remote job may be ABANDONED for a new attempt at another
// provider ([Attempt.NoRemoteJob]).
package attempt

import (
	"context"
	"errors"
	"fmt"
	"github.com/aivedio/pipeline/shared/pg"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Status is task_attempts.status.
type Status string

// The statuses (the table's CHECK constraint).
const (
	Submitting    Status = "SUBMITTING"
	Accepted      Status = "ACCEPTED"
	SubmitUnknown Status = "SUBMIT_UNKNOWN"
	Rejected      Status = "REJECTED"
	Failed        Status = "FAILED"
	Succeeded     Status = "SUCCEEDED"
	Canceled      Status = "CANCELED"
	// Abandoned: the attempt created no remote job, and the task went on
	// with a new attempt at another provider.
	Abandoned Status = "ABANDONED"
)

// ErrNotFound: no attempt matches.
var ErrNotFound = errors.New("attempt not found")

// Querier runs statements: a pool, a connection or a transaction.
type Querier = pg.Querier

// Attempt is one task_attempts row.
type Attempt struct {
	ID              uuid.UUID
	TaskID          uuid.UUID
	No              int
	Provider        string
	Model           string // the model's name at Provider
	IdempotencyKey  string
	ClientRequestID string
	ProviderJobID   string // "" until the provider named the job
	Status          Status
	ErrorCode       string // the last refusal's or failure's, "" when none
	CreatedAt       time.Time
	UpdatedAt       time.Time
	// RequestStartedAt is when the submit was sent, ResponseAt when its
	// answer came; nil until then.
	RequestStartedAt, ResponseAt *time.Time
	// Sends counts the submits sent under the attempt's key (counted
	// before each call), RefusedSends those the provider refused before
	// creating anything.
	Sends, RefusedSends int
}

// NoRemoteJob reports whether the attempt is known to have created no
// remote job: every submit it sent was refused outright, or a lookup
// confirmed the job absent. Only such an attempt may be left for another
// provider; any other may have a job that a second provider would pay for
// twice.
func (a Attempt) NoRemoteJob() bool {
	return a.Status == Submitting && a.RefusedSends == a.Sends
}

// StartedAt is when the submit was sent (its creation when unknown): a
// lookup of a lost answer searches from there.
func (a Attempt) StartedAt() time.Time {
	if a.RequestStartedAt != nil {
		return *a.RequestStartedAt
	}
	return a.CreatedAt
}

const columns = `attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id,
	coalesce(provider_job_id, ''), status, coalesce(error_code, ''), created_at, updated_at, request_started_at, response_at,
	sends, refused_sends`

func scan(row pgx.Row) (Attempt, error) {
	var a Attempt
	err := row.Scan(&a.ID, &a.TaskID, &a.No, &a.Provider, &a.Model, &a.IdempotencyKey, &a.ClientRequestID, &a.ProviderJobID, &a.Status,
		&a.ErrorCode, &a.CreatedAt, &a.UpdatedAt, &a.RequestStartedAt, &a.ResponseAt, &a.Sends, &a.RefusedSends)
	if errors.Is(err, pgx.ErrNoRows) {
		return Attempt{}, ErrNotFound
	}
	if err != nil {
		return Attempt{}, fmt.Errorf("read attempt: %w", err)
	}
	return a, nil
}

// Open creates the task's next attempt, SUBMITTING, in tx: attempt_no one
// above the last, the idempotency key "<task id>-<attempt no>" (unique,
// so two attempts can never share a remote job), and a new client request
// id.
func Open(ctx context.Context, tx pgx.Tx, taskID uuid.UUID, provider, model string) (Attempt, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return Attempt{}, err
	}
	return scan(tx.QueryRow(ctx, `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, request_started_at)
		SELECT $1, $2::uuid, coalesce(max(attempt_no), 0) + 1, $3, $4, $2::uuid::text || '-' || (coalesce(max(attempt_no), 0) + 1), $1::uuid::text, now()
		FROM task_attempts WHERE task_id = $2::uuid
		RETURNING `+columns, id, taskID, provider, model))
}

// List is every attempt of the task, oldest first.
func List(ctx context.Context, q Querier, taskID uuid.UUID) ([]Attempt, error) {
	rows, err := q.Query(ctx, `SELECT `+columns+` FROM task_attempts WHERE task_id = $1 ORDER BY attempt_no`, taskID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of task %s: %w", taskID, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Attempt, error) { return scan(row) })
	if err != nil {
		return nil, fmt.Errorf("list attempts of task %s: %w", taskID, err)
	}
	return out, nil
}

// Latest is the task's newest attempt in status.
func Latest(ctx context.Context, q Querier, taskID uuid.UUID, status Status) (Attempt, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM task_attempts WHERE task_id = $1 AND status = $2
		ORDER BY attempt_no DESC LIMIT 1`, taskID, status))
}

// Get is the task's attempt id.
func Get(ctx context.Context, q Querier, taskID, id uuid.UUID) (Attempt, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM task_attempts WHERE attempt_id = $1 AND task_id = $2`, id, taskID))
}

// OfJob is the task's attempt that created provider job jobID.
func OfJob(ctx context.Context, q Querier, taskID uuid.UUID, jobID string) (Attempt, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM task_attempts WHERE task_id = $1 AND provider_job_id = $2`, taskID, jobID))
}

// OfProviderJob is the attempt, of any task, that created the provider's
// job jobID: what a callback, which names only the job, is about.
func OfProviderJob(ctx context.Context, q Querier, provider, jobID string) (Attempt, error) {
	return scan(q.QueryRow(ctx, `SELECT `+columns+` FROM task_attempts WHERE provider = $1 AND provider_job_id = $2`, provider, jobID))
}

// Answer records the provider's answer to attempt id's submit: its status,
// the job id when the provider named one, and the error code and message
// when it refused or could not be read (empty: none).
func Answer(ctx context.Context, q Querier, id uuid.UUID, status Status, jobID, code, message string) error {
	return exec(ctx, q, "record the answer of", id, `UPDATE task_attempts SET status = $2, provider_job_id = coalesce(nullif($3, ''), provider_job_id),
		error_code = nullif($4, ''), error_message = nullif($5, ''), response_at = now(), updated_at = now() WHERE attempt_id = $1`,
		status, jobID, code, message)
}

// NoteSend counts a submit about to be sent under attempt id's key. It
// commits before the call: a process that dies mid-call leaves the send
// counted and not refused, so the attempt can no longer claim it made no
// remote job.
// An attempt no longer SUBMITTING (abandoned, answered meanwhile) is
// [ErrNotFound]: nothing may be sent under it.
func NoteSend(ctx context.Context, q Querier, id uuid.UUID) error {
	tag, err := q.Exec(ctx, `UPDATE task_attempts SET sends = sends + 1, updated_at = now()
		WHERE attempt_id = $1 AND status = 'SUBMITTING'`, id)
	if err != nil {
		return fmt.Errorf("count a send of attempt %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("count a send of attempt %s: %w (no longer SUBMITTING)", id, ErrNotFound)
	}
	return nil
}

// NoteRefusal records a refusal the attempt survives (a 429 or 503: the
// retry goes to the same remote job, so it keeps its status). outright
// says the provider created nothing for this send (see
// [provider.RefusedOutright]); only then does the send count as refused.
func NoteRefusal(ctx context.Context, q Querier, id uuid.UUID, code, message string, outright bool) error {
	return exec(ctx, q, "note a refusal of", id, `UPDATE task_attempts SET error_code = $2, error_message = $3, response_at = now(), updated_at = now(),
		refused_sends = CASE WHEN $4 THEN least(refused_sends + 1, sends) ELSE refused_sends END
		WHERE attempt_id = $1`, code, message, outright)
}

// Abandon leaves attempt id, which created no remote job, for a new attempt
// at another provider; reason says why, for the timeline of attempts.
// It refuses, with [ErrNotFound], an attempt that is no longer SUBMITTING
// or that may have made a job.
func Abandon(ctx context.Context, q Querier, id uuid.UUID, reason string) error {
	tag, err := q.Exec(ctx, `UPDATE task_attempts SET status = $2, error_code = 'failover', error_message = $3, updated_at = now()
		WHERE attempt_id = $1 AND status = 'SUBMITTING' AND refused_sends = sends`, id, Abandoned, reason)
	if err != nil {
		return fmt.Errorf("abandon attempt %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("abandon attempt %s: %w (no longer SUBMITTING, or it may have made a remote job)", id, ErrNotFound)
	}
	return nil
}

// Found records the job a lookup found for attempt id, whose answer was
// lost: ACCEPTED with its job id.
func Found(ctx context.Context, q Querier, id uuid.UUID, jobID string) error {
	return exec(ctx, q, "record the job found for", id, `UPDATE task_attempts SET status = $2, provider_job_id = $3, updated_at = now() WHERE attempt_id = $1`,
		Accepted, jobID)
}

// Reopen makes attempt id SUBMITTING again: the provider confirmed it has
// no job for it, and the resubmit goes with the same idempotency key. The
// confirmed absence counts every send so far as refused: the attempt may
// fail over.
func Reopen(ctx context.Context, q Querier, id uuid.UUID) error {
	return exec(ctx, q, "reopen", id, `UPDATE task_attempts SET status = $2, refused_sends = sends, updated_at = now() WHERE attempt_id = $1`, Submitting)
}

// End records how the job of the task's attempt jobID ended.
func End(ctx context.Context, q Querier, taskID uuid.UUID, jobID string, status Status, code, message string) error {
	_, err := q.Exec(ctx, `UPDATE task_attempts SET status = $3, error_code = nullif($4, ''), error_message = nullif($5, ''), updated_at = now()
		WHERE task_id = $1 AND provider_job_id = $2`, taskID, jobID, status, code, message)
	if err != nil {
		return fmt.Errorf("record the end of job %s: %w", jobID, err)
	}
	return nil
}

func exec(ctx context.Context, q Querier, what string, id uuid.UUID, sql string, args ...any) error {
	if _, err := q.Exec(ctx, sql, append([]any{id}, args...)...); err != nil {
		return fmt.Errorf("%s attempt %s: %w", what, id, err)
	}
	return nil
}
