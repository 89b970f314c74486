// Package tenant creates tenants and their API keys and authenticates
// requests by key.
//
// A key is shown once, when it is made, and stored only as its SHA-256
// hash: a leaked database leaks no usable credential. Keys are 32 random
// bytes, so a plain hash (not a slow password hash) is enough: there is
// nothing to brute-force.
package tenant

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/pg"
)

// KeyPrefix starts every API key, so a leaked key is recognisable in a
// secret scanner.
const KeyPrefix = "avk_"

// Roles of an API key.
const (
	RoleTenant = "tenant"
	RoleAdmin  = "admin"
)

// ErrUnauthorized: the key is unknown, revoked, or its tenant is not active.
var ErrUnauthorized = errors.New("unknown or revoked API key")

// Principal is who a request acts as.
type Principal struct {
	TenantID uuid.UUID
	KeyID    uuid.UUID
	Role     string
	Priority int
}

// NewTenant is a tenant to create.
type NewTenant struct {
	Name     string
	Priority int
	Credits  int64 // starting balance; 0 for none
}

// Created is a new tenant and its first key, shown only now.
type Created struct {
	TenantID uuid.UUID
	KeyID    uuid.UUID
	Key      string
}

// Create makes a tenant, its credit account with the starting balance and
// a key of the given role, in tx.
func Create(ctx context.Context, tx pgx.Tx, n NewTenant, role string) (Created, error) {
	if strings.TrimSpace(n.Name) == "" {
		return Created{}, errors.New("tenant name must not be empty")
	}
	var c Created
	if err := tx.QueryRow(ctx, `INSERT INTO tenants (name, priority) VALUES ($1, $2) RETURNING tenant_id`, n.Name, n.Priority).Scan(&c.TenantID); err != nil {
		return Created{}, fmt.Errorf("create tenant: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO credit_accounts (tenant_id) VALUES ($1)`, c.TenantID); err != nil {
		return Created{}, fmt.Errorf("open credit account: %w", err)
	}
	if n.Credits > 0 {
		if _, err := billing.TopUp(ctx, tx, c.TenantID, n.Credits, "initial:"+c.TenantID.String()); err != nil {
			return Created{}, err
		}
	}
	var err error
	c.KeyID, c.Key, err = NewKey(ctx, tx, c.TenantID, role)
	if err != nil {
		return Created{}, err
	}
	return c, nil
}

// NewKey makes another key for a tenant.
func NewKey(ctx context.Context, tx pgx.Tx, tenantID uuid.UUID, role string) (uuid.UUID, string, error) {
	if role != RoleTenant && role != RoleAdmin {
		return uuid.Nil, "", fmt.Errorf("key role must be %q or %q, got %q", RoleTenant, RoleAdmin, role)
	}
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return uuid.Nil, "", fmt.Errorf("generate key: %w", err)
	}
	key := KeyPrefix + base64.RawURLEncoding.EncodeToString(secret)
	hash := sha256.Sum256([]byte(key))
	var keyID uuid.UUID
	if err := tx.QueryRow(ctx, `INSERT INTO api_keys (tenant_id, key_hash, role) VALUES ($1, $2, $3) RETURNING key_id`,
		tenantID, hash[:], role).Scan(&keyID); err != nil {
		return uuid.Nil, "", fmt.Errorf("store key: %w", err)
	}
	return keyID, key, nil
}

// Authenticate finds who key belongs to. Malformed, unknown and revoked
// keys and inactive tenants are all ErrUnauthorized: the caller learns
// nothing about which.
func Authenticate(ctx context.Context, q pg.Querier, key string) (Principal, error) {
	if !strings.HasPrefix(key, KeyPrefix) || len(key) > 128 {
		return Principal{}, ErrUnauthorized
	}
	hash := sha256.Sum256([]byte(key))
	var p Principal
	err := q.QueryRow(ctx, `SELECT k.tenant_id, k.key_id, k.role, t.priority FROM api_keys k JOIN tenants t USING (tenant_id)
		WHERE k.key_hash = $1 AND k.revoked_at IS NULL AND t.status = 'ACTIVE'`, hash[:]).Scan(&p.TenantID, &p.KeyID, &p.Role, &p.Priority)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, ErrUnauthorized
	}
	if err != nil {
		return Principal{}, fmt.Errorf("look up API key: %w", err)
	}
	return p, nil
}
