// Package pg names the PostgreSQL handles the pipeline's packages take, so
// that every function reading or writing the database accepts a pool, a
// connection or a transaction through the same two interfaces.
package pg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier runs statements: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is a Querier that also starts transactions: a pool or a connection
// (a pgx.Tx too, whose Begin makes a savepoint).
type DB interface {
	Querier
	Begin(ctx context.Context) (pgx.Tx, error)
}

// UTC is *t in UTC, and nil for nil: the packages report the nullable
// timestamps they read in UTC, whatever the session's time zone.
func UTC(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
