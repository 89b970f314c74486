package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// CallbackParser verifies and reads one provider's completion callbacks.
// Every provider.Client is one.
type CallbackParser interface {
	// Name is the provider's name: the {provider} of the callback path and
	// task_attempts.provider.
	Name() string
	// ParseCallback checks the signature and timestamp of a callback and
	// returns the job it reports. A bad signature or a stale timestamp is
	// a *provider.Error of class provider.ClassRejected.
	ParseCallback(header http.Header, body []byte, now time.Time) (provider.Job, error)
}

var _ CallbackParser = provider.Client(nil)

// errNotThisAttempt: a callback whose job carries another attempt's client
// request id than the attempt recorded with its job id.
type errNotThisAttempt struct{ error }

// providerCallback serves POST /v1/provider-callbacks/{provider}. A
// verified callback about a job of ours becomes a provider.callback.received
// event for the poll stage, which asks the provider for the job's state
// itself: the callback only says "look now". The answer is 202 whether or
// not the job is ours, so a provider never retries a callback we cannot use.
func (s *Server) providerCallback(w http.ResponseWriter, r *http.Request) *apiError {
	name := r.PathValue("provider")
	parser, ok := s.callbacks[name]
	if !ok {
		return errorf(http.StatusNotFound, CodeUnknownProvider, "no provider %q takes callbacks here", truncate(name, 64))
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.limits.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return bodyTooLarge(s.limits.MaxBodyBytes)
		}
		return errorf(http.StatusBadRequest, CodeInvalidCallback, "could not read the callback body")
	}
	job, err := parser.ParseCallback(r.Header, body, s.now())
	if err != nil {
		s.log.WarnContext(r.Context(), "provider callback refused", slog.String("provider", name),
			slog.String("error", err.Error()), slog.String("request_id", requestID(r.Context())))
		if provider.ClassOf(err) == provider.ClassRejected {
			return errorf(http.StatusUnauthorized, CodeInvalidSignature, "the callback's signature or timestamp did not verify")
		}
		return errorf(http.StatusBadRequest, CodeInvalidCallback, "the callback is not in the provider's documented format")
	}
	if job.ID == "" {
		return errorf(http.StatusBadRequest, CodeInvalidCallback, "the callback names no job")
	}

	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	var taskID uuid.UUID
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		ours, err := attempt.OfProviderJob(ctx, tx, name, job.ID)
		if err != nil {
			return err
		}
		taskID = ours.TaskID
		if err := provider.CheckIdentity(name, provider.CheckedAtCallback, job, ours.ClientRequestID); err != nil {
			return errNotThisAttempt{err}
		}
		t, err := task.Get(ctx, tx, taskID)
		if err != nil {
			return err
		}
		ev, err := origin.Emit(t, task.CallbackReceived{Provider: name, ProviderJobID: job.ID})
		if err != nil {
			return err
		}
		// The provider's request carries no trace of ours: the event
		// continues the task's, linked to this request's.
		wctx, span, err := task.ContinueTrace(ctx, tx, taskID, "provider callback "+name)
		defer span.End()
		if err != nil {
			return err
		}
		return outbox.Write(wctx, tx, ev)
	})
	var mismatch errNotThisAttempt
	switch {
	case errors.As(err, &mismatch):
		// The job id is one of ours, the job is not: another run's or
		// another attempt's job with a reused id. Never applied.
		s.log.WarnContext(ctx, "provider callback refused", slog.String("provider", name), slog.String("provider_job_id", job.ID),
			slog.String("task_id", taskID.String()), slog.String("error", mismatch.Error()), slog.String("request_id", requestID(ctx)))
	case errors.Is(err, attempt.ErrNotFound):
		// Not ours, or its submit answer is not recorded yet; polling
		// covers the second case.
		s.log.InfoContext(ctx, "provider callback for an unknown job ignored", slog.String("provider", name),
			slog.String("provider_job_id", job.ID), slog.String("request_id", requestID(ctx)))
	case err != nil:
		return s.internal(ctx, "record provider callback", err)
	default:
		s.log.InfoContext(ctx, "provider callback accepted", slog.String("provider", name),
			slog.String("provider_job_id", job.ID), slog.String("task_id", taskID.String()), slog.String("request_id", requestID(ctx)))
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"status": "accepted"})
	return nil
}
