package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"

	"github.com/golang-migrate/migrate/v4"
	// Registers the pgx5:// database driver with golang-migrate.
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

// FS holds the migration files, named the golang-migrate way
// (000001_messaging.up.sql, 000001_messaging.down.sql, ...).
//
//go:embed *.sql
var FS embed.FS

// Up applies every migration not yet applied to the database at databaseURL
// (a postgres:// or postgresql:// URL). A database that is already up to date
// is not an error.
func Up(ctx context.Context, databaseURL string) error {
	if err := run(ctx, databaseURL, (*migrate.Migrate).Up); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// Down reverts every applied migration, dropping all the tables, indexes,
// triggers and functions the migrations created. Data is lost; it exists for
// tests and for tearing down development databases. A database with nothing
// applied is not an error.
func Down(ctx context.Context, databaseURL string) error {
	if err := run(ctx, databaseURL, (*migrate.Migrate).Down); err != nil {
		return fmt.Errorf("revert migrations: %w", err)
	}
	return nil
}

// To migrates the database at databaseURL up or down to version, the
// number that starts a migration's file name.
func To(ctx context.Context, databaseURL string, version uint) error {
	if err := run(ctx, databaseURL, func(m *migrate.Migrate) error { return m.Migrate(version) }); err != nil {
		return fmt.Errorf("migrate to version %d: %w", version, err)
	}
	return nil
}

// run opens a migrator, runs step with it and closes it. golang-migrate takes
// no context: cancelling ctx asks it to stop between two migrations, so the
// one being applied still completes or rolls back as a whole.
func run(ctx context.Context, databaseURL string, step func(*migrate.Migrate) error) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	driverURL, err := pgx5URL(databaseURL)
	if err != nil {
		return err
	}
	src, err := iofs.New(FS, ".")
	if err != nil {
		return fmt.Errorf("open embedded migrations: %w", err)
	}
	m, err := migrate.NewWithSourceInstance("iofs", src, driverURL)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() {
		srcErr, dbErr := m.Close()
		if srcErr != nil || dbErr != nil {
			err = errors.Join(err, fmt.Errorf("close migrator: %w", errors.Join(srcErr, dbErr)))
		}
	}()

	stop := context.AfterFunc(ctx, func() {
		// GracefulStop has room for one value; a second would block forever.
		select {
		case m.GracefulStop <- true:
		default:
		}
	})
	defer stop()

	if err := step(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	// A graceful stop makes golang-migrate return nil with migrations left
	// unapplied; report why it stopped.
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// pgx5URL turns a postgres:// URL into the pgx5:// form that selects
// golang-migrate's pgx v5 driver. Only the scheme changes.
func pgx5URL(databaseURL string) (string, error) {
	u, err := url.Parse(databaseURL)
	if err != nil {
		// url.Error repeats the URL, and with it any password: keep it out.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	switch u.Scheme {
	case "postgres", "postgresql", "pgx5":
	default:
		return "", fmt.Errorf("database URL scheme %q: want postgres:// or postgresql://", u.Scheme)
	}
	u.Scheme = "pgx5"
	return u.String(), nil
}
