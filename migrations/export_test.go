package migrations

import (
	"context"

	"github.com/golang-migrate/migrate/v4"
)

// MigrateTo moves the schema at databaseURL to version, up or down, so a
// test can write rows the way an older schema held them.
func MigrateTo(ctx context.Context, databaseURL string, version uint) error {
	return run(ctx, databaseURL, func(m *migrate.Migrate) error { return m.Migrate(version) })
}
