package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	embeddedpostgres "github.com/fergusstrange/embedded-postgres"
	"github.com/jackc/pgx/v5"
)

// Credentials of the embedded PostgreSQL: it listens on loopback only.
const (
	pgUser     = "aivedio"
	pgPassword = "aivedio"
	pgDatabase = "aivedio"
)

// Postgres starts PostgreSQL 16 with its data under dir (created if
// missing; kept between runs) and returns its URL and a stop function.
//
// A PostgreSQL an earlier run left behind (that run was killed, and
// PostgreSQL, started by pg_ctl as a daemon, outlived it) is stopped first,
// and a postmaster.pid whose process is gone is removed, so a run killed at
// any moment starts again by itself. The caller must hold the data
// directory's [Lock]: only then is a live PostgreSQL of dir surely an
// orphan and not another run's.
//
// PostgreSQL refuses to run as root. As root, its processes (initdb,
// pg_ctl, postgres) run as the user "nobody", who then owns dir; dir must
// be reachable by nobody. Everything else of the program stays root.
func Postgres(dir string, logs io.Writer) (url string, stop func() error, err error) {
	runAs, err := postgresUser()
	if err != nil {
		return "", nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return "", nil, fmt.Errorf("embedded postgres directory: %w", err)
	}
	data := filepath.Join(dir, "data")
	if err := stopOrphan(data, logs); err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("embedded postgres directory: %w", err)
	}
	if runAs != nil {
		if err := runAs.prepare(dir); err != nil {
			return "", nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cfg := embeddedpostgres.DefaultConfig().
		Version(embeddedpostgres.V16).
		Port(uint32(port)).
		Database(pgDatabase).Username(pgUser).Password(pgPassword).
		RuntimePath(filepath.Join(dir, "runtime")).
		DataPath(data).
		// The downloaded archive is a cache, not state: it is kept out of
		// dir so that wiping the state does not download it again.
		CachePath(binariesCache(runAs)).
		StartTimeout(2 * time.Minute).
		Logger(logs)
	db := embeddedpostgres.NewDatabase(cfg)
	if err := runAs.do(db.Start); err != nil {
		return "", nil, fmt.Errorf("start embedded postgres (binaries download from Maven Central on first use): %w", err)
	}
	stop = func() error { return stopPostmaster(data, logs) }
	if err := ensureDatabase(port); err != nil {
		_ = stop()
		return "", nil, err
	}
	return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/%s?sslmode=disable", pgUser, pgPassword, port, pgDatabase), stop, nil
}

// binariesCache is where the PostgreSQL archive from Maven Central is kept:
// per user that runs PostgreSQL, since one user's folder is not writable by
// another.
func binariesCache(runAs *credential) string {
	uid := os.Getuid()
	if runAs != nil {
		uid = runAs.uid
	}
	return filepath.Join(os.TempDir(), "aivedio-embedded-postgres-"+strconv.Itoa(uid))
}

// ensureDatabase creates the application database when it is missing. The
// library creates it only right after initdb; a run killed between the two
// would otherwise leave a cluster that never gets it.
func ensureDatabase(port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", pgUser, pgPassword, port))
	if err != nil {
		return fmt.Errorf("connect to embedded postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, pgDatabase).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", pgDatabase, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{pgDatabase}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", pgDatabase, err)
	}
	return nil
}

// errNoProc is returned where a process cannot be identified without /proc.
var errNoProc = errors.New("no /proc to identify the process")
