package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/aivedio/pipeline/shared/pg"
)

// Querier runs one query returning one row: a *pgxpool.Pool, *pgx.Conn or
// pgx.Tx.
type Querier = pg.Querier

// pendingSQL reads the backlog from the partial pending index. The age uses
// clock_timestamp(), not now(), which inside a long transaction would be the
// transaction's start.
const pendingSQL = `
SELECT count(*), COALESCE((extract(epoch FROM clock_timestamp() - min(created_at)) * 1000000)::int8, 0)
FROM outbox_events
WHERE published_at IS NULL`

// Pending reports the relay's backlog for metrics and readiness: the number
// of committed events not yet published, and how long ago the oldest of them
// was written (zero when there are none). Rows of transactions still open are
// not counted: they are not pending until they commit.
func Pending(ctx context.Context, q Querier) (count int, oldest time.Duration, err error) {
	var micros int64
	if err := q.QueryRow(ctx, pendingSQL).Scan(&count, &micros); err != nil {
		return 0, 0, fmt.Errorf("count pending outbox events: %w", err)
	}
	return count, time.Duration(max(micros, 0)) * time.Microsecond, nil
}

// PendingFor reports whether an event of aggregate aggregateID (a task,
// a render, an upload id, as the envelope spells it) waits in the outbox,
// committed and not yet published. A repair that would re-emit a lost
// step asks this first: such an event is the aggregate's next step on its
// way (the relay or the broker is slow or down), so re-emitting adds
// nothing, and a repair that counts its rounds must not count it as one.
func PendingFor(ctx context.Context, q Querier, aggregateID string) (bool, error) {
	var pending bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL AND aggregate_id = $1)`,
		aggregateID).Scan(&pending); err != nil {
		return false, fmt.Errorf("is an event of aggregate %s pending in the outbox: %w", aggregateID, err)
	}
	return pending, nil
}
