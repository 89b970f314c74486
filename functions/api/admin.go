package api

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/tenant"
)

// Bounds of a new tenant.
const (
	MaxTenantName     = 200
	MinTenantPriority = 0
	MaxTenantPriority = 100
	MaxInitialCredits = 1_000_000_000_000
)

type createTenantBody struct {
	Name     string `json:"name"`
	Priority int    `json:"priority"`
	Credits  int64  `json:"credits"`
}

type createdTenant struct {
	TenantID uuid.UUID `json:"tenant_id"`
	KeyID    uuid.UUID `json:"key_id"`
	APIKey   string    `json:"api_key"`
}

// createTenant serves POST /v1/admin/tenants: a tenant with its credit
// account, starting credits and a key of role tenant, shown only in this
// answer.
func (s *Server) createTenant(w http.ResponseWriter, r *http.Request, admin tenant.Principal) *apiError {
	var b createTenantBody
	if e := decodeJSON(w, r, s.limits.MaxBodyBytes, &b); e != nil {
		return e
	}
	bad := func(format string, args ...any) *apiError {
		return errorf(http.StatusBadRequest, CodeInvalidField, format, args...)
	}
	switch {
	case strings.TrimSpace(b.Name) == "":
		return bad("name is required and must not be blank")
	case utf8.RuneCountInString(b.Name) > MaxTenantName:
		return bad("name is longer than %d characters", MaxTenantName)
	case strings.ContainsRune(b.Name, 0):
		return bad("name must not contain NUL characters")
	case b.Priority < MinTenantPriority || b.Priority > MaxTenantPriority:
		return bad("priority must be from %d to %d, got %d", MinTenantPriority, MaxTenantPriority, b.Priority)
	case b.Credits < 0 || b.Credits > MaxInitialCredits:
		return bad("credits must be from 0 to %d, got %d", int64(MaxInitialCredits), b.Credits)
	}
	ctx, cancel := context.WithTimeout(r.Context(), dbTimeout)
	defer cancel()
	var c tenant.Created
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(ctx, tx, tenant.NewTenant{Name: b.Name, Priority: b.Priority, Credits: b.Credits}, tenant.RoleTenant)
		return err
	})
	if err != nil {
		return s.internal(ctx, "create tenant", err)
	}
	s.log.InfoContext(ctx, "tenant created", slog.String("tenant_id", c.TenantID.String()), slog.String("key_id", c.KeyID.String()),
		slog.String("by_tenant_id", admin.TenantID.String()), slog.String("by_key_id", admin.KeyID.String()),
		slog.String("request_id", requestID(ctx)))
	w.Header().Set("Cache-Control", "no-store") // the key is in the body
	writeJSON(w, http.StatusCreated, createdTenant{TenantID: c.TenantID, KeyID: c.KeyID, APIKey: c.Key})
	return nil
}
