// Package attention holds the decisions a person makes on a task the
// pipeline handed over in NEEDS_ATTENTION because a submit's outcome stayed
// unknown (reconcile.submit_unknown: Runway, which offers no lookup, or a
// lookup that never answered). Resubmitting blind could pay the provider
// twice, so a person looks at the provider's console and says what they
// found: the job (the task follows it as if the lookup had found it), or
// none (the attempt is resubmitted with the same key, as after a lookup
// that proved the job absent). Every decision is kept in task_resolutions
// with its ticket and operator, in the transaction that acts on it.
package attention

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// Producer names the decisions' events and timeline rows.
const Producer = "operator"

// SubmitUnknown is the code of the tasks a person resolves here.
const SubmitUnknown = "reconcile.submit_unknown"

// Decision is what a person found at the provider for a task.
type Decision struct {
	TaskID uuid.UUID
	// JobID is the provider's job they found; "" with NoJob.
	JobID string
	// NoJob says they made sure the provider has no job for the attempt.
	NoJob    bool
	Ticket   string
	Operator string
	Reason   string
}

// Resolution is a decision as carried out.
type Resolution struct {
	ID        uuid.UUID
	Task      task.Task // as moved
	AttemptID uuid.UUID
	Provider  string
}

// ErrNotResolvable: the task is not one a person resolves here (not in
// NEEDS_ATTENTION reconcile.submit_unknown, or without an attempt whose
// answer was lost). Nothing was changed.
var ErrNotResolvable = errors.New("task is not resolvable")

// Validate says what is missing from d, naming the flag.
func (d Decision) Validate() error {
	switch {
	case d.TaskID == uuid.Nil:
		return errors.New("the task id is required")
	case (d.JobID == "") == !d.NoJob:
		return errors.New("say what you found: --job <provider job id>, or --no-job")
	case strings.TrimSpace(d.Ticket) == "":
		return errors.New("--ticket is required: the decision is audited")
	case strings.TrimSpace(d.Operator) == "":
		return errors.New("--operator is required: the decision is audited")
	}
	return nil
}

// Resolve carries d out in tx: the audit row, the attempt (ACCEPTED with
// the job, or SUBMITTING again with every send counted refused), and the
// task's move with its events (a poll after POLL_FIRST_DELAY, or a
// submit), all or nothing.
func Resolve(ctx context.Context, tx pgx.Tx, j config.Journey, d Decision) (Resolution, error) {
	if err := d.Validate(); err != nil {
		return Resolution{}, err
	}
	// The lock keeps the row it read, for a refusal to say what the task
	// is, and its error names the task.
	var locked task.Task
	k := task.Kind
	k.Lock = func(ctx context.Context, tx pgx.Tx, id uuid.UUID) (task.Task, error) {
		cur, err := task.Lock(ctx, tx, id)
		if err != nil {
			return task.Task{}, fmt.Errorf("task %s: %w", id, err)
		}
		locked = cur
		return cur, nil
	}
	var r Resolution
	res, err := aggregate.Apply(ctx, tx, k, d.TaskID, resolvable, func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		var err error
		r, err = carryOut(ctx, tx, j, d, cur)
		return aggregate.Applied, err
	})
	if err != nil {
		return Resolution{}, err
	}
	if res == aggregate.Stale {
		return Resolution{}, fmt.Errorf("%w: task %s is %s %s; only a task in %s %s is resolved here",
			ErrNotResolvable, locked.ID, locked.Status, locked.ErrorCode, task.NeedsAttention, SubmitUnknown)
	}
	return r, nil
}

// resolvable is a person's decision on a task, which holds while the
// task, as locked, is one the pipeline handed over because a submit's
// outcome stayed unknown. It names no target: the pipeline's table of
// moves has none out of NEEDS_ATTENTION, and [task.Resolve] checks a
// person's move against its own.
var resolvable = aggregate.Transition[task.Status, task.Task]{
	From: []task.Status{task.NeedsAttention},
	If:   func(cur task.Task) bool { return cur.ErrorCode == SubmitUnknown },
}

// carryOut carries d out on cur, locked and resolvable: it refuses a task
// without an attempt whose answer was lost.
func carryOut(ctx context.Context, tx pgx.Tx, j config.Journey, d Decision, cur task.Task) (Resolution, error) {
	lost, err := attempt.Latest(ctx, tx, cur.ID, attempt.SubmitUnknown)
	if errors.Is(err, attempt.ErrNotFound) {
		return Resolution{}, fmt.Errorf("%w: task %s has no attempt whose answer was lost", ErrNotResolvable, cur.ID)
	}
	if err != nil {
		return Resolution{}, err
	}
	decision, job := "NO_JOB", (*string)(nil)
	if !d.NoJob {
		decision, job = "JOB", &d.JobID
	}
	id := uuid.Must(uuid.NewV7())
	if _, err := tx.Exec(ctx, `INSERT INTO task_resolutions (resolution_id, task_id, attempt_id, decision, provider_job_id, ticket, operator, reason)
		VALUES ($1, $2, $3, $4, $5, $6, $7, nullif($8, ''))`, id, cur.ID, lost.ID, decision, job, d.Ticket, d.Operator, d.Reason); err != nil {
		return Resolution{}, fmt.Errorf("record the resolution of task %s: %w", cur.ID, err)
	}
	o := task.Origin{Producer: Producer, CorrelationID: cur.ID.String()}
	why := fmt.Sprintf("resolved by %s (ticket %s)", d.Operator, d.Ticket)
	none := ""
	var moved task.Task
	if d.NoJob {
		if err := attempt.Reopen(ctx, tx, lost.ID); err != nil {
			return Resolution{}, err
		}
		resubmit, err := o.Emit(cur, task.SubmitRequested{TaskID: cur.ID, Version: cur.Version + 1})
		if err != nil {
			return Resolution{}, err
		}
		moved, err = task.Resolve(ctx, tx, o, cur, task.Transition{To: task.Submitting,
			Reason: why + ": the provider has no job for the lost submit; resubmitting with the same key",
			Set:    task.Fields{ErrorCode: &none, ErrorMessage: &none}, Events: []outbox.Event{resubmit}})
		if err != nil {
			return Resolution{}, err
		}
	} else {
		if err := attempt.Found(ctx, tx, lost.ID, d.JobID); err != nil {
			return Resolution{}, err
		}
		now := time.Now()
		pollAt := now.Add(j.PollFirst).UTC().Truncate(time.Microsecond)
		poll, err := o.EmitAt(cur, task.PollDue{TaskID: cur.ID, AttemptID: lost.ID, PollAt: pollAt, Wait: task.Wait{
			ExpectedStatus: task.ProviderRunning, ExpectedVersion: cur.Version + 1, NotBefore: pollAt, Reason: "lost submit resolved"}}, pollAt)
		if err != nil {
			return Resolution{}, err
		}
		moved, err = task.Resolve(ctx, tx, o, cur, task.Transition{To: task.ProviderRunning, Reason: why + ": the provider's job " + d.JobID,
			Set:    task.Fields{ProviderJobID: &d.JobID, NextPollAt: &pollAt, DeadlineAt: task.Ptr(now.Add(j.MaxWait)), ErrorCode: &none, ErrorMessage: &none},
			Events: []outbox.Event{poll}})
		if err != nil {
			return Resolution{}, err
		}
	}
	return Resolution{ID: id, Task: moved, AttemptID: lost.ID, Provider: lost.Provider}, nil
}
