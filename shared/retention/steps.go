package retention

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/shared/pg"
)

// step runs fn in a transaction that holds the table's maintenance lock and
// waits at most p.LockTimeout for any lock. The advisory key names the
// schema too, so tests in their own schemas do not wait for each other.
func step(ctx context.Context, db pg.DB, t table, p Params, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, fmt.Sprintf("%dms", p.LockTimeout.Milliseconds())); err != nil {
			return fmt.Errorf("set lock_timeout: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('retention/' || current_schema() || '/' || $1, 0))`, t.name); err != nil {
			return fmt.Errorf("take the maintenance lock of %s: %w", t.name, err)
		}
		return fn(tx)
	})
}

// isBusy reports a lock not granted in time, or a deadlock PostgreSQL broke
// by cancelling this side: the step is skipped until the next run.
func isBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.LockNotAvailable || pgErr.Code == pgerrcode.DeadlockDetected)
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// create attaches the partition of day to t, unless another run did
// meanwhile. It builds the partition as a table of its own, moves the rows
// of its range out of the default partition into it, and attaches it, in
// one transaction: an event id is in exactly one partition at every moment.
func create(ctx context.Context, db pg.DB, t table, p Params, day time.Time) (created bool, moved int64, err error) {
	lo, hi := idAt(day), idAt(day.Add(Day))
	name := partitionName(t.name, day)
	err = step(ctx, db, t, p, func(tx pgx.Tx) error {
		created, moved = false, 0
		parts, err := partitions(ctx, tx, t.name) // again, under the lock
		if err != nil {
			return err
		}
		if slices.ContainsFunc(parts, func(p partition) bool { return p.overlaps(lo, hi) }) {
			return nil
		}
		// LIKE takes the parent's columns in its order, defaults and
		// checks; ATTACH adds the indexes (the table is nearly empty).
		if _, err := tx.Exec(ctx, `CREATE TABLE `+ident(name)+` (LIKE `+ident(t.name)+
			` INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE INCLUDING COMPRESSION)`); err != nil {
			return err
		}
		if i := slices.IndexFunc(parts, func(p partition) bool { return p.isDefault }); i >= 0 {
			def := ident(parts[i].name)
			// Taken first, so that ATTACH does not upgrade the move's lock
			// on the default (a deadlock with a writer of the default).
			if _, err := tx.Exec(ctx, `LOCK TABLE `+def+` IN ACCESS EXCLUSIVE MODE`); err != nil {
				return err
			}
			tag, err := tx.Exec(ctx, `WITH moved AS (DELETE FROM ONLY `+def+` WHERE event_id >= $1 AND event_id < $2 RETURNING *)
				INSERT INTO `+ident(name)+` SELECT * FROM moved`, lo, hi)
			if err != nil {
				return fmt.Errorf("move rows of %s out of %s: %w", name, parts[i].name, err)
			}
			moved = tag.RowsAffected()
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`,
			ident(t.name), ident(name), lo, hi)); err != nil {
			return err
		}
		created = true
		return nil
	})
	return created, moved, err
}

// drop drops part when nothing keeps it: it checks without locks first, so
// a partition that must stay costs no exclusive lock, then again under the
// parent's ACCESS EXCLUSIVE lock, which DROP needs anyway and under which
// no row of it can change.
func drop(ctx context.Context, db pg.DB, t table, p Params, part partition, horizon time.Time) (kept *Kept, dropped bool, err error) {
	kept, err = keeps(ctx, db, t, part.name, horizon)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable {
		return nil, false, nil // another run dropped it since the listing
	}
	if err != nil || kept != nil {
		return kept, false, err
	}
	err = step(ctx, db, t, p, func(tx pgx.Tx) error {
		kept, dropped = nil, false
		var attached bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass($1) AND inhparent = to_regclass($2))`,
			part.name, t.name).Scan(&attached); err != nil || !attached {
			return err // another run dropped it
		}
		// ONLY: the partitions are locked by the DROP itself, the one
		// dropped and the default; every other access goes through the
		// parent.
		if _, err := tx.Exec(ctx, `LOCK TABLE ONLY `+ident(t.name)+` IN ACCESS EXCLUSIVE MODE`); err != nil {
			return err
		}
		var err error
		if kept, err = keeps(ctx, tx, t, part.name, horizon); err != nil || kept != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DROP TABLE `+ident(part.name)); err != nil {
			return err
		}
		dropped = true
		return nil
	})
	return kept, dropped, err
}

// keeps says why partition must stay, or nil. Both questions are answered
// from small indexes: the unpublished rows from the partial pending index,
// the recent ones from the BRIN on the time a row was written.
func keeps(ctx context.Context, q pg.Querier, t table, partition string, horizon time.Time) (*Kept, error) {
	if t.published {
		var n int64
		if err := q.QueryRow(ctx, `SELECT count(*) FROM ONLY `+ident(partition)+` WHERE published_at IS NULL`).Scan(&n); err != nil {
			return nil, fmt.Errorf("count unpublished rows of %s: %w", partition, err)
		}
		if n > 0 {
			return &Kept{Partition: partition, Reason: KeptUnpublished, Rows: n}, nil
		}
	}
	var recent bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ONLY `+ident(partition)+` WHERE `+t.written+` > $1)`, horizon).Scan(&recent); err != nil {
		return nil, fmt.Errorf("look for recent rows in %s: %w", partition, err)
	}
	if recent {
		return &Kept{Partition: partition, Reason: KeptRecent}, nil
	}
	return nil, nil
}
