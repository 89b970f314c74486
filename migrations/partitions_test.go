package migrations_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/dbtest"
)

// idAt is a UUIDv7-shaped id whose time is at.
func idAt(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	id := newID(t)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// partitionOf names the partition that holds the row of table with id.
func partitionOf(t *testing.T, q querier, table string, id uuid.UUID) string {
	t.Helper()
	var name string
	require.NoError(t, q.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM `+table+` WHERE event_id = $1`, id).Scan(&name))
	return name
}

func day(at time.Time) string { return at.UTC().Format("20060102") }

// TestLogsArePartitionedByEventID: both logs are partitioned by RANGE on
// event_id, with a partition per UTC day from a week ago to three days
// ahead, a history below and a default beside them; a UUIDv7 id goes to
// the partition of its day and a UUIDv4 id to the default.
func TestLogsArePartitionedByEventID(t *testing.T) {
	t.Parallel()
	tx := dbtest.TestTx(t)
	ctx := t.Context()
	now := time.Now().UTC()

	for _, table := range []string{"outbox_events", "inbox_dedup"} {
		var key string
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_get_partkeydef($1::regclass)`, table).Scan(&key))
		require.Equal(t, "RANGE (event_id)", key, table)

		rows, err := tx.Query(ctx, `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass`, table)
		require.NoError(t, err)
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Contains(t, parts, table+"_default")
		require.Contains(t, parts, table+"_history")
		for d := -7; d <= 3; d++ {
			require.Contains(t, parts, table+"_p"+day(now.AddDate(0, 0, d)), "%s: day %+d", table, d)
		}
	}

	v7, v4 := newID(t), uuid.MustParse("f1c2d3e4-0000-4000-8000-000000000001")
	for _, id := range []uuid.UUID{v7, v4} {
		_, err := tx.Exec(ctx, `INSERT INTO outbox_events
			(event_id, event_type, producer, topic, tag, aggregate_type, aggregate_id, tenant_id, payload, occurred_at)
			VALUES ($1, 'generation.submit.requested', 'api', 'generation.submit', 'generation.submit.requested',
				'generation_task', 'task', $2, '{}', now())`, id, newID(t))
		require.NoError(t, err)
		require.NoError(t, insertInbox(ctx, tx, "cg.scheduler.submit.v1", id))
	}
	require.Equal(t, "outbox_events_p"+day(now), partitionOf(t, tx, "outbox_events", v7))
	require.Equal(t, "inbox_dedup_p"+day(now), partitionOf(t, tx, "inbox_dedup", v7))
	require.Equal(t, "outbox_events_default", partitionOf(t, tx, "outbox_events", v4))
	require.Equal(t, "inbox_dedup_default", partitionOf(t, tx, "inbox_dedup", v4))
}

// TestPartitioningKeepsEveryRow converts tables holding rows of every kind
// (published and not, weeks old, days old, today's, UUIDv4 ids at both
// ends of the range) and back: every row keeps every value, each lands in
// the partition its id names, and the old table's indexes serve as the
// history's instead of being built again.
func TestPartitioningKeepsEveryRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	url := schemaURL(t, pool)
	require.NoError(t, migrations.MigrateTo(ctx, url, 10))

	now := time.Now().UTC()
	type row struct {
		id        uuid.UUID
		published bool
		want      string // partition suffix after the conversion
	}
	rows := []row{
		{idAt(t, now.AddDate(0, 0, -30)), true, "_history"},
		{idAt(t, now.AddDate(0, 0, -30)), false, "_history"},
		{idAt(t, now.AddDate(0, 0, -8)), true, "_history"},
		{idAt(t, now.AddDate(0, 0, -2)), true, "_p" + day(now.AddDate(0, 0, -2))},
		{idAt(t, now), false, "_p" + day(now)},
		{uuid.MustParse("00000000-1111-4000-8000-000000000001"), true, "_history"},
		{uuid.MustParse("ffffffff-1111-4000-8000-000000000001"), false, "_default"},
	}
	for i, r := range rows {
		var published *time.Time
		if r.published {
			published = &now
		}
		_, err := pool.Exec(ctx, `INSERT INTO outbox_events
			(event_id, event_type, producer, topic, tag, message_group, aggregate_type, aggregate_id, tenant_id, payload,
				occurred_at, published_at, publish_attempts, last_error_code, trace_id, trace_parent)
			VALUES ($1, 'task.state.changed', 'api', 'generation.state.fifo', 'task.state.changed', 'task', 'generation_task', 'task',
				$2, $3, now(), $4, $5, 'timeout', '0af7651916cd43dd8448eb211c80319c', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')`,
			r.id, newID(t), map[string]any{"n": i}, published, i)
		require.NoError(t, err)
		require.NoError(t, insertInbox(ctx, pool, "cg.notification.push.v1", r.id))
	}
	digest := func() (outbox, inbox string) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT
			(SELECT md5(string_agg(o::text, '|' ORDER BY event_id)) FROM outbox_events o),
			(SELECT md5(string_agg(i::text, '|' ORDER BY event_id)) FROM inbox_dedup i)`).Scan(&outbox, &inbox))
		return outbox, inbox
	}
	outboxBefore, inboxBefore := digest()

	require.NoError(t, migrations.Up(ctx, url))
	outboxAfter, inboxAfter := digest()
	require.Equal(t, outboxBefore, outboxAfter, "outbox rows changed")
	require.Equal(t, inboxBefore, inboxAfter, "inbox rows changed")
	for _, r := range rows {
		require.Equal(t, "outbox_events"+r.want, partitionOf(t, pool, "outbox_events", r.id), "outbox row %s", r.id)
		require.Equal(t, "inbox_dedup"+r.want, partitionOf(t, pool, "inbox_dedup", r.id), "inbox row %s", r.id)
	}
	for history, idx := range map[string]string{
		"outbox_events_history_pkey": "outbox_events_pkey", "outbox_events_history_pending_idx": "outbox_events_pending_idx",
		"outbox_events_history_pending_group_idx": "outbox_events_pending_group_idx",
		"outbox_events_history_created_at_brin":   "outbox_events_created_at_brin",
		"inbox_dedup_history_pkey":                "inbox_dedup_pkey", "inbox_dedup_history_processed_at_brin": "inbox_dedup_processed_at_brin",
	} {
		var parent string
		require.NoError(t, pool.QueryRow(ctx, `SELECT inhparent::regclass::text FROM pg_inherits WHERE inhrelid = $1::regclass`, history).
			Scan(&parent), "index %s", history)
		require.Equal(t, idx, parent, "%s serves the history", history)
	}

	require.NoError(t, migrations.MigrateTo(ctx, url, 10))
	outboxDown, inboxDown := digest()
	require.Equal(t, outboxBefore, outboxDown, "outbox rows changed going down")
	require.Equal(t, inboxBefore, inboxDown, "inbox rows changed going down")
	var partitioned bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = 'outbox_events'::regclass`).Scan(&partitioned))
	require.False(t, partitioned)
}
