package dbtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// setupTimeout bounds creating and migrating a schema; cleanupTimeout bounds
// rolling back and dropping it.
const (
	setupTimeout   = time.Minute
	cleanupTimeout = 30 * time.Second
)

// TestSchema creates a schema with a unique name, applies every migration to
// it, and returns a pool whose connections have it as their search_path, so
// unqualified table names resolve to it. The pool is closed and the schema
// dropped in tb.Cleanup.
func TestSchema(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	schemaURL := TestSchemaURL(tb)
	ctx, cancel := context.WithTimeout(tb.Context(), setupTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, schemaURL)
	if err != nil {
		tb.Fatalf("dbtest: open pool on test schema: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// TestSchemaURL is [TestSchema] for code that opens its own connections:
// it returns a DATABASE_URL whose search_path is a new migrated schema,
// dropped in tb.Cleanup.
func TestSchemaURL(tb testing.TB) string {
	tb.Helper()
	databaseURL := servicetest.Env(tb, "PostgreSQL", "DATABASE_URL")
	ctx, cancel := context.WithTimeout(tb.Context(), setupTimeout)
	defer cancel()

	schema := "test_" + randomHex(8)
	if err := execOnce(ctx, databaseURL, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("dbtest: create schema %s: %v", schema, err)
	}
	// Registered before anything else can fail, so the schema never leaks;
	// cleanups run last-in first-out, so pools opened later close first.
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), cleanupTimeout)
		defer cancel()
		if err := execOnce(ctx, databaseURL, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Errorf("dbtest: drop schema %s: %v", schema, err)
		}
	})

	schemaURL, err := withSearchPath(databaseURL, schema)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	if err := migrations.Up(ctx, schemaURL); err != nil {
		tb.Fatalf("dbtest: schema %s: %v", schema, err)
	}
	return schemaURL
}

// TestTx begins a transaction on a schema shared by the whole test binary
// (migrated by the first caller) and rolls it back in tb.Cleanup. The
// transaction uses its own connection, so tests holding one do not wait for
// each other except on conflicting rows.
func TestTx(tb testing.TB) pgx.Tx {
	tb.Helper()
	databaseURL := servicetest.Env(tb, "PostgreSQL", "DATABASE_URL")
	ctx, cancel := context.WithTimeout(tb.Context(), setupTimeout)
	defer cancel()

	schema, err := txSchema.migrate(ctx, databaseURL)
	if err != nil {
		tb.Fatalf("dbtest: shared schema: %v", err)
	}

	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		tb.Fatalf("dbtest: parse DATABASE_URL: %v", err)
	}
	config.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(ctx, config)
	if err != nil {
		tb.Fatalf("dbtest: connect: %v", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		_ = conn.Close(context.WithoutCancel(ctx))
		tb.Fatalf("dbtest: begin: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), cleanupTimeout)
		defer cancel()
		// ErrTxClosed: the test committed or rolled back itself. Committing a
		// TestTx defeats its purpose but must not hide the test's own result.
		if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
			tb.Errorf("dbtest: roll back: %v", err)
		}
		if err := conn.Close(ctx); err != nil {
			tb.Errorf("dbtest: close connection: %v", err)
		}
	})
	return tx
}

// txSchema is the schema behind TestTx.
var txSchema sharedSchema

// sharedSchema migrates the TestTx schema once per test binary. Its name
// carries a hash of the migration files, so editing a migration gives the
// next run a fresh schema instead of one migrated by the old text, and test
// binaries of one `go test ./...` run (separate processes) share it; the
// migration lock makes their concurrent Up calls wait for each other.
type sharedSchema struct {
	mu   sync.Mutex
	name string // set once migrated
}

func (s *sharedSchema) migrate(ctx context.Context, databaseURL string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.name != "" {
		return s.name, nil
	}
	name, err := sharedSchemaName()
	if err != nil {
		return "", err
	}
	if err := createSchema(ctx, databaseURL, name); err != nil {
		return "", err
	}
	schemaURL, err := withSearchPath(databaseURL, name)
	if err != nil {
		return "", err
	}
	if err := migrations.Up(ctx, schemaURL); err != nil {
		return "", fmt.Errorf("schema %s: %w", name, err)
	}
	// Failures are not cached: a later test tries again and reports its own
	// error rather than a stale one.
	s.name = name
	return name, nil
}

// createSchema creates the schema if it does not exist. CREATE SCHEMA IF NOT
// EXISTS is not safe against itself in concurrent sessions (the loser can
// still hit a unique violation in pg_namespace), so test binaries running in
// parallel take a transaction-scoped advisory lock on the name first.
func createSchema(ctx context.Context, databaseURL, name string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", name); err != nil {
			return fmt.Errorf("lock schema %s: %w", name, err)
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create schema %s: %w", name, err)
		}
		return nil
	})
}

// sharedSchemaName is dbtest_ followed by a hash of every migration file.
func sharedSchemaName() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return "dbtest_" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// execOnce runs one statement on a connection of its own.
func execOnce(ctx context.Context, databaseURL, sql string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	_, err = conn.Exec(ctx, sql)
	return err
}

// withSearchPath returns databaseURL with search_path set to schema, which
// both pgx and golang-migrate pass on as a run-time parameter.
func withSearchPath(databaseURL, schema string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		// url.Error repeats the URL, and with it any password: keep it out.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// randomHex returns n random bytes in hex: lower case, so a valid unquoted
// identifier after a letter prefix.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error.
	return hex.EncodeToString(b)
}
