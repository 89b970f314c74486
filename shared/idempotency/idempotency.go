// Package idempotency creates a row once per tenant and client
// idempotency key: the rule every API create follows (a generation, an
// upload, a render), so that a client's retry of a request gets the row
// the first one made and a reuse of its key for another request is told
// apart.
//
// # Guarantees
//
// Create runs in the caller's transaction. Of two creates under one key at
// once, the second's insert waits for the first's transaction: when that
// one commits, the second reads its row (created false); when it rolls
// back, the second creates. A row is a retry of the request when the
// request hash it was created with equals the new one; otherwise Create
// returns the row and the table's conflict error.
//
// The table needs a unique index on (tenant_id, client_idempotency_key),
// which the insert names in its ON CONFLICT … DO NOTHING: that is what
// makes the second insert wait instead of failing.
package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Table is how [Create] reaches the rows of one table.
type Table[T any] struct {
	// Name names a row in errors: "task", "upload", "render".
	Name string
	// Existing reads the row of tenant $1 under key $2, the columns Scan
	// reads.
	Existing string
	// Scan reads a row, and returns NotFound for none.
	Scan     func(pgx.Row) (T, error)
	NotFound error
	// RequestHash is the hash of the request a row was created by.
	RequestHash func(T) []byte
	// Conflict is returned, with the existing row, when a key is reused
	// for a different request.
	Conflict error
}

// Key is a client's request: its tenant, its idempotency key and the hash
// of what it asks for.
type Key struct {
	TenantID    uuid.UUID
	Key         string
	RequestHash []byte
}

// Create runs insert with args in tx: an INSERT … ON CONFLICT (tenant_id,
// client_idempotency_key) DO NOTHING RETURNING the columns t.Scan reads.
// It returns the new row with created true or, when k's key already names
// one, that row with created false, and t.Conflict when that row was made
// by another request than k's.
func Create[T any](ctx context.Context, tx pgx.Tx, t Table[T], k Key, insert string, args ...any) (row T, created bool, err error) {
	row, err = t.Scan(tx.QueryRow(ctx, insert, args...))
	if errors.Is(err, t.NotFound) {
		existing, err := t.Scan(tx.QueryRow(ctx, t.Existing, k.TenantID, k.Key))
		if err != nil {
			var zero T
			return zero, false, fmt.Errorf("read %s of idempotency key: %w", t.Name, err)
		}
		if !bytes.Equal(t.RequestHash(existing), k.RequestHash) {
			return existing, false, t.Conflict
		}
		return existing, false, nil
	}
	if err != nil {
		var zero T
		return zero, false, fmt.Errorf("create %s: %w", t.Name, err)
	}
	return row, true, nil
}
