package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// taskRef is the answer of creating and canceling: where a task stands.
type taskRef struct {
	TaskID  uuid.UUID   `json:"task_id"`
	Status  task.Status `json:"status"`
	Version int64       `json:"version"`
	Message string      `json:"message,omitempty"`
}

// createGeneration serves POST /v1/generations: 202 for a new task, 200
// with the existing one for a repeat of the same request under the same
// Idempotency-Key.
func (s *Server) createGeneration(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	if e := s.shed.refuse(p); e != nil {
		s.log.InfoContext(r.Context(), "create shed", slog.String("tenant_id", p.TenantID.String()), slog.Int("priority", p.Priority))
		return e
	}
	key, e := idempotencyKey(r.Header)
	if e != nil {
		return e
	}
	var body createBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &body); e != nil {
		return e
	}
	req, e := s.validate(body)
	if e != nil {
		return e
	}

	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	var (
		t       task.Task
		created bool
	)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		t, created, err = task.Create(ctx, tx, origin, task.New{
			TenantID: p.TenantID, IdempotencyKey: key, RequestHash: req.hash(),
			Model: req.Model, Prompt: req.Prompt, DurationSeconds: req.DurationSeconds, Resolution: req.Resolution,
			InputAssetIDs: req.InputAssetIDs, Priority: req.Priority,
		})
		if err != nil || !created {
			return err
		}
		if e := s.checkInputs(ctx, tx, p.TenantID, req.InputAssetIDs); e != nil {
			return e
		}
		if err := s.checkQuota(ctx, tx, p.TenantID, asset.Usage{Assets: 1}, false); err != nil {
			return err
		}
		amount := s.price.Of(req.Model, req.DurationSeconds)
		if err := billing.Reserve(ctx, tx, p.TenantID, t.ID, amount); err != nil {
			if errors.Is(err, billing.ErrInsufficientCredits) {
				return s.insufficientCredits(ctx, tx, p.TenantID, amount)
			}
			return err
		}
		submit, err := origin.Emit(t, task.SubmitRequested{TaskID: t.ID, Version: t.Version})
		if err != nil {
			return err
		}
		return outbox.Write(ctx, tx, submit)
	})
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, task.ErrIdempotencyConflict):
		return errorf(http.StatusConflict, CodeIdempotencyConflict,
			"Idempotency-Key %q was already used for a different request (task %s); use a new key for a new generation, or resend the original request unchanged",
			key, t.ID)
	case err != nil:
		return s.internal(ctx, "create generation", err)
	}

	w.Header().Set("Location", "/v1/generations/"+t.ID.String())
	ref := taskRef{TaskID: t.ID, Status: t.Status, Version: t.Version}
	if !created {
		w.Header().Set("Idempotent-Replayed", "true")
		writeJSON(w, http.StatusOK, ref)
		return nil
	}
	s.log.InfoContext(ctx, "generation accepted", slog.String("task_id", t.ID.String()),
		slog.String("tenant_id", p.TenantID.String()), slog.String("model", req.Model),
		slog.Int("duration_seconds", req.DurationSeconds), slog.String("request_id", requestID(ctx)))
	writeJSON(w, http.StatusAccepted, ref)
	return nil
}

// checkQuota refuses a create that takes the tenant past its asset quota
// (see asset.CheckQuota): 409 quota_exceeded naming the limit.
func (s *Server) checkQuota(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, adding asset.Usage, inserted bool) error {
	err := asset.CheckQuota(ctx, tx, tenantID, asset.Quota{MaxAssets: s.limits.TenantMaxAssets, MaxBytes: s.limits.TenantMaxBytes}, adding, inserted)
	var qe *asset.QuotaError
	if errors.As(err, &qe) {
		return errorf(http.StatusConflict, CodeQuotaExceeded, "%s; this would pass it, so nothing was created. The API offers no deletion yet: an operator can raise the quota (adapter tenants quota)", qe)
	}
	return err
}

// checkInputs refuses input assets the tenant does not own; another
// tenant's asset reads exactly like one that does not exist.
func (s *Server) checkInputs(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	owned, err := asset.Owned(ctx, tx, tenantID, ids)
	if err != nil {
		return err
	}
	for _, id := range ids {
		found := false
		for _, o := range owned {
			found = found || o == id
		}
		if !found {
			return errorf(http.StatusBadRequest, CodeInvalidField, "input asset %s does not exist; upload it first", id)
		}
	}
	return nil
}

// insufficientCredits is the 402 that says what the generation needs and
// what the tenant has.
func (s *Server) insufficientCredits(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, amount int64) error {
	acct, err := billing.GetAccount(ctx, tx, tenantID)
	if err != nil {
		return err
	}
	return errorf(http.StatusPaymentRequired, CodeInsufficientCredits,
		"this generation needs %d credits but only %d are available (balance %d, of which %d are held by unfinished generations); top up, or ask for a shorter video",
		amount, acct.Available(), acct.Balance, acct.Reserved)
}
