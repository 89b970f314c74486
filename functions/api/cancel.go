package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// cancelRounds bounds how often a cancel re-reads a task that changed
// between its read and its versioned write.
const cancelRounds = 3

// cancelGeneration serves POST /v1/generations/{id}/cancel:
//
//   - QUEUED or WAITING_RETRY: CANCELED at once, with the settle event that
//     releases the reservation, in one transaction; 200.
//   - a terminal state: 409, nothing changes.
//   - any other state: cancel_requested is set and the answer is 202 with
//     the current status. A running provider job is asked to stop at once
//     (through an immediate poll); a task past the provider ends
//     CANCELED_WITH_OUTPUT, keeping its output and charged.
//
// Every write is a compare-and-set on the version read; a task that moved
// meanwhile is re-read and decided again, never written blindly.
func (s *Server) cancelGeneration(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	id, e := taskID(r)
	if e != nil {
		return e
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	for range cancelRounds {
		var (
			status int
			ref    taskRef
		)
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			var err error
			status, ref, err = s.cancelOnce(ctx, tx, p.TenantID, id)
			return err
		})
		var ae *apiError
		switch {
		case errors.Is(err, task.ErrStale):
			continue
		case errors.Is(err, task.ErrNotFound):
			return taskNotFound()
		case errors.As(err, &ae):
			return ae
		case err != nil:
			return s.internal(ctx, "cancel generation", err)
		}
		s.log.InfoContext(ctx, "generation cancel", slog.String("task_id", id.String()), slog.String("tenant_id", p.TenantID.String()),
			slog.String("status", string(ref.Status)), slog.String("request_id", requestID(ctx)))
		writeJSON(w, status, ref)
		return nil
	}
	e = errorf(http.StatusConflict, CodeBusy, "generation %s changed state while it was being canceled; send the cancel again", id)
	e.Header = http.Header{"Retry-After": {"1"}}
	return e
}

// cancelOnce decides from the task as read in tx and writes the decision
// with a versioned update; task.ErrStale when the task moved first.
func (s *Server) cancelOnce(ctx context.Context, tx pgx.Tx, tenantID, id uuid.UUID) (int, taskRef, error) {
	cur, err := task.GetForTenant(ctx, tx, tenantID, id)
	if err != nil {
		return 0, taskRef{}, err
	}
	switch {
	case cur.Status.Terminal():
		return 0, taskRef{}, errorf(http.StatusConflict, CodeTaskFinished,
			"generation %s already finished as %s (version %d); there is nothing to cancel", id, cur.Status, cur.Version)

	case cur.Status == task.Queued || cur.Status == task.WaitingRetry:
		settle, err := origin.Emit(cur, task.SettleRequested{TaskID: cur.ID, Status: task.Canceled})
		if err != nil {
			return 0, taskRef{}, err
		}
		next, err := task.Apply(ctx, tx, origin, cur, task.Transition{
			To: task.Canceled, Reason: "canceled by the client",
			Set:    task.Fields{CancelRequested: task.Ptr(true), ClearNextRetryAt: true},
			Events: []outbox.Event{settle},
		})
		if err != nil {
			return 0, taskRef{}, err
		}
		return http.StatusOK, taskRef{TaskID: next.ID, Status: next.Status, Version: next.Version,
			Message: "canceled; the credits held for it are being released"}, nil

	default:
		// Not a transition (the status stays), so the version stays too: a
		// version is one timeline row and one state-changed event. The
		// update is still conditional on the status and version read, and
		// the stage that next moves the task reads the flag. A running
		// provider job is asked to stop at once: the poll chain is moved
		// to now (its scheduled message goes stale), and the poll stage
		// cancels at the provider.
		if !cur.CancelRequested {
			var pollAt *time.Time
			var poll []outbox.Event
			if cur.Status == task.ProviderRunning {
				now := time.Now().UTC().Truncate(time.Microsecond)
				running, err := attempt.OfJob(ctx, tx, cur.ID, cur.ProviderJobID)
				switch {
				case errors.Is(err, attempt.ErrNotFound):
					// No attempt names the job (not a state the stages
					// leave): the chain's next poll reads the flag.
				case err != nil:
					return 0, taskRef{}, fmt.Errorf("attempt of running task %s: %w", cur.ID, err)
				default:
					e, err := origin.EmitAt(cur, task.PollDue{TaskID: cur.ID, AttemptID: running.ID, PollAt: now}, now)
					if err != nil {
						return 0, taskRef{}, err
					}
					pollAt, poll = &now, []outbox.Event{e}
				}
			}
			if err := task.RequestCancel(ctx, tx, cur, pollAt); err != nil {
				return 0, taskRef{}, err
			}
			if err := outbox.Write(ctx, tx, poll...); err != nil {
				return 0, taskRef{}, err
			}
		}
		return http.StatusAccepted, taskRef{TaskID: cur.ID, Status: cur.Status, Version: cur.Version,
			Message: fmt.Sprintf("cancel requested while the generation is %s: a running provider job is asked to stop. "+
				"If the provider stops it, the generation ends CANCELED and its credits are released; if the provider had already "+
				"finished, it ends CANCELED_WITH_OUTPUT: the output is kept and charged. GET /v1/generations/%s shows where it stands", cur.Status, cur.ID)}, nil
	}
}
