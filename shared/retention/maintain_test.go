package retention_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/retention"
)

var logs = []string{"outbox_events", "inbox_dedup"}

// TestCreatesPartitionsAhead: ten days on, a run creates every day from
// the window's start to three days ahead, an event of those days goes to
// its own partition, and a second run has nothing to do.
func TestCreatesPartitionsAhead(t *testing.T) {
	t.Parallel()
	b := setup(t)
	later := b.now.AddDate(0, 0, 10)

	rep := b.maintain(t, retention.Params{Now: later})
	for _, table := range logs {
		tr := tableReport(t, rep, table)
		var want []string
		for d := 4; d <= 13; d++ { // the migration made today-7 to today+3
			want = append(want, name(table, b.now.AddDate(0, 0, d)))
		}
		require.Equal(t, want, tr.Created, table)
		parts := b.partitionsOf(t, table)
		for d := 3; d <= 13; d++ {
			require.Contains(t, parts, name(table, b.now.AddDate(0, 0, d)), "%s day %+d", table, d)
		}
	}
	id := idAt(t, b.now.AddDate(0, 0, 12))
	b.outboxRow(t, id, b.now, false)
	b.inboxRow(t, id, b.now)
	require.Equal(t, name("outbox_events", b.now.AddDate(0, 0, 12)), b.partitionOf(t, "outbox_events", id))
	require.Equal(t, name("inbox_dedup", b.now.AddDate(0, 0, 12)), b.partitionOf(t, "inbox_dedup", id))

	again := b.maintain(t, retention.Params{Now: later})
	for _, tr := range again.Tables {
		require.Empty(t, tr.Created, tr.Table)
		require.Empty(t, tr.Dropped, tr.Table)
	}
}

// TestNewPartitionTakesItsRowsFromTheDefault: events of a day without a
// partition wait in the default; the run that creates the day moves them
// into it, whole, and leaves a UUIDv4 row where it is.
func TestNewPartitionTakesItsRowsFromTheDefault(t *testing.T) {
	t.Parallel()
	b := setup(t)
	future := b.now.AddDate(0, 0, 20)
	early, v4 := idAt(t, future), uuid.New()
	for _, id := range []uuid.UUID{early, v4} {
		b.outboxRow(t, id, b.now, false)
		b.inboxRow(t, id, b.now)
		require.Equal(t, "outbox_events_default", b.partitionOf(t, "outbox_events", id))
	}
	var before string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT o::text FROM outbox_events o WHERE event_id = $1`, early).Scan(&before))

	rep := b.maintain(t, retention.Params{Now: future})
	for _, table := range logs {
		tr := tableReport(t, rep, table)
		require.Contains(t, tr.Created, name(table, future))
		require.Equal(t, int64(1), tr.Moved, table)
		require.Equal(t, int64(1), tr.DefaultRows, "%s: the v4 row stays in the default", table)
		require.Equal(t, name(table, future), b.partitionOf(t, table, early))
		require.Equal(t, table+"_default", b.partitionOf(t, table, v4))
	}
	var after string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT o::text FROM outbox_events o WHERE event_id = $1`, early).Scan(&after))
	require.Equal(t, before, after, "the moved row keeps every value")
}

// TestDropsOnlyWhatIsSafe: with a three-day window, a partition past it is
// dropped when it is fully published and nothing in it was written within
// the window; one with an unpublished row, or with a row written lately,
// stays (and the unpublished one goes once published); a partition inside
// the window and the default are never touched, and no row of a kept
// partition is lost.
func TestDropsOnlyWhatIsSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ago := func(days int) time.Time { return b.now.AddDate(0, 0, -days) }
	p := retention.Params{Window: 72 * time.Hour}

	unpublished := idAt(t, ago(6))
	b.outboxRow(t, idAt(t, ago(7)), ago(7), true) // old and published
	b.inboxRow(t, idAt(t, ago(7)), ago(7))
	b.outboxRow(t, unpublished, ago(6), false)
	b.inboxRow(t, idAt(t, ago(6)), ago(6))
	b.outboxRow(t, idAt(t, ago(5)), b.now, true) // an old id written now
	b.inboxRow(t, idAt(t, ago(5)), b.now)        // processed now
	// day -4 stays empty
	b.outboxRow(t, idAt(t, ago(3)), ago(3), true) // inside the window
	b.inboxRow(t, idAt(t, ago(3)), ago(3))
	low, high := uuid.MustParse("00000000-0001-4000-8000-000000000001"), uuid.MustParse("ffffffff-0001-4000-8000-000000000001")
	b.outboxRow(t, low, ago(30), true) // in the history's range
	b.outboxRow(t, high, ago(30), true)
	b.inboxRow(t, high, ago(30))
	require.Equal(t, "outbox_events_history", b.partitionOf(t, "outbox_events", low))

	rep := b.maintain(t, p)
	out, in := tableReport(t, rep, "outbox_events"), tableReport(t, rep, "inbox_dedup")
	require.ElementsMatch(t, []string{"outbox_events_history", name("outbox_events", ago(7)), name("outbox_events", ago(4))}, out.Dropped)
	require.ElementsMatch(t, []retention.Kept{
		{Partition: name("outbox_events", ago(6)), Reason: retention.KeptUnpublished, Rows: 1},
		{Partition: name("outbox_events", ago(5)), Reason: retention.KeptRecent},
	}, out.Kept)
	require.ElementsMatch(t, []string{"inbox_dedup_history", name("inbox_dedup", ago(7)), name("inbox_dedup", ago(6)), name("inbox_dedup", ago(4))}, in.Dropped)
	require.Equal(t, []retention.Kept{{Partition: name("inbox_dedup", ago(5)), Reason: retention.KeptRecent}}, in.Kept)
	require.Equal(t, int64(1), out.DefaultRows)
	require.Equal(t, int64(1), in.DefaultRows)
	for _, table := range logs {
		parts := b.partitionsOf(t, table)
		require.Contains(t, parts, table+"_default")
		for d := -3; d <= 3; d++ {
			require.Contains(t, parts, name(table, b.now.AddDate(0, 0, d)), "%s day %+d is inside the window or ahead", table, d)
		}
	}
	require.Equal(t, 4, b.count(t, "outbox_events"), "days -6, -5, -3 and the default keep their rows")
	require.Equal(t, 3, b.count(t, "inbox_dedup"), "days -5, -3 and the default keep their rows")

	again := b.maintain(t, p)
	require.Empty(t, tableReport(t, again, "outbox_events").Dropped)
	require.Len(t, tableReport(t, again, "outbox_events").Kept, 2, "kept partitions are reported every run")

	_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE event_id = $1`, unpublished)
	require.NoError(t, err)
	published := b.maintain(t, p)
	require.Equal(t, []string{name("outbox_events", ago(6))}, tableReport(t, published, "outbox_events").Dropped)
}

// TestConcurrentRunsAreSafe: four runs at once (reconcile replicas) create
// and drop every partition exactly once between them, without an error,
// and leave the layout one run would.
func TestConcurrentRunsAreSafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	p := retention.Params{Now: b.now.AddDate(0, 0, 15), LockTimeout: 10 * time.Second}

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created = map[string][]string{}
		dropped = map[string][]string{}
	)
	for range 4 {
		wg.Go(func() {
			rep, err := retention.Maintain(t.Context(), b.pool, p)
			mu.Lock()
			defer mu.Unlock()
			require.NoError(t, err)
			for _, tr := range rep.Tables {
				require.Empty(t, tr.Busy, tr.Table)
				created[tr.Table] = append(created[tr.Table], tr.Created...)
				dropped[tr.Table] = append(dropped[tr.Table], tr.Dropped...)
			}
		})
	}
	wg.Wait()

	for _, table := range logs {
		// The window starts at day 8: days 8 to 18 are made, the history
		// and every partition before day 8 go.
		var want []string
		for d := 8; d <= 18; d++ {
			want = append(want, name(table, b.now.AddDate(0, 0, d)))
		}
		slices.Sort(created[table])
		require.Equal(t, want, created[table], "%s: each day created once", table)
		wantDropped := []string{table + "_history"}
		for d := -7; d <= 3; d++ {
			wantDropped = append(wantDropped, name(table, b.now.AddDate(0, 0, d)))
		}
		slices.Sort(wantDropped)
		slices.Sort(dropped[table])
		require.Equal(t, wantDropped, dropped[table], "%s: each partition dropped once", table)

		var layout []string
		for d := 8; d <= 18; d++ {
			layout = append(layout, name(table, b.now.AddDate(0, 0, d)))
		}
		layout = append(layout, table+"_default")
		slices.Sort(layout)
		require.Equal(t, layout, b.partitionsOf(t, table))
	}
}

// TestBusyLockIsSkipped: a run that cannot get a lock within LockTimeout
// gives up on that step without an error and without waiting longer, and
// the next run does it.
func TestBusyLockIsSkipped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	future := b.now.AddDate(0, 0, 5)

	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	// What a long transaction that read a default row holds.
	_, err = holder.Exec(ctx, `LOCK TABLE outbox_events_default IN ACCESS SHARE MODE`)
	require.NoError(t, err)

	start := time.Now()
	rep := b.maintain(t, retention.Params{Now: future, Window: 20 * 24 * time.Hour, LockTimeout: 100 * time.Millisecond})
	require.Less(t, time.Since(start), 5*time.Second)
	out := tableReport(t, rep, "outbox_events")
	require.Empty(t, out.Created)
	require.Equal(t, []string{"create " + name("outbox_events", b.now.AddDate(0, 0, 4)), "create " + name("outbox_events", b.now.AddDate(0, 0, 5)),
		"create " + name("outbox_events", b.now.AddDate(0, 0, 6)), "create " + name("outbox_events", b.now.AddDate(0, 0, 7)),
		"create " + name("outbox_events", b.now.AddDate(0, 0, 8))}, out.Busy)
	require.Len(t, tableReport(t, rep, "inbox_dedup").Created, 5, "the inbox is not held up by the outbox")

	require.NoError(t, holder.Rollback(ctx))
	rep = b.maintain(t, retention.Params{Now: future, Window: 20 * 24 * time.Hour, LockTimeout: 100 * time.Millisecond})
	require.Len(t, tableReport(t, rep, "outbox_events").Created, 5)
	require.Empty(t, tableReport(t, rep, "outbox_events").Busy)
}
