package outbox

import (
	"context"
	"fmt"
	"github.com/aivedio/pipeline/shared/pg"
	"time"
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
