package retention_test

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/retention"
)

type testBundle struct {
	pool *pgxpool.Pool
	now  time.Time
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t)}
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT clock_timestamp()`).Scan(&b.now))
	b.now = b.now.UTC()
	return b
}

// idAt is a UUIDv7 made at at.
func idAt(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id
}

// outboxRow writes an outbox row with id, written at written, published
// or not.
func (b *testBundle) outboxRow(t *testing.T, id uuid.UUID, written time.Time, published bool) {
	t.Helper()
	var publishedAt *time.Time
	if published {
		publishedAt = &written
	}
	_, err := b.pool.Exec(t.Context(), `INSERT INTO outbox_events
		(event_id, event_type, producer, topic, tag, aggregate_type, aggregate_id, tenant_id, payload, occurred_at, created_at, published_at)
		VALUES ($1, 'generation.submit.requested', 'api', 'generation.submit', 'generation.submit.requested',
			'generation_task', 'task', $2, '{}', $3, $3, $4)`, id, uuid.New(), written, publishedAt)
	require.NoError(t, err)
}

// inboxRow records id as processed by a consumer at processed.
func (b *testBundle) inboxRow(t *testing.T, id uuid.UUID, processed time.Time) {
	t.Helper()
	sum := sha256.Sum256(id[:])
	_, err := b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash, processed_at)
		VALUES ('cg.asset.fetch.v1', $1, 'APPLIED', $2, $3)`, id, sum[:], processed)
	require.NoError(t, err)
}

// partitionsOf lists table's partitions by name.
func (b *testBundle) partitionsOf(t *testing.T, table string) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass ORDER BY 1`, table)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

// partitionOf names the partition holding table's row of id.
func (b *testBundle) partitionOf(t *testing.T, table string, id uuid.UUID) string {
	t.Helper()
	var name string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM `+table+` WHERE event_id = $1`, id).Scan(&name))
	return name
}

func (b *testBundle) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM `+table).Scan(&n))
	return n
}

func (b *testBundle) maintain(t *testing.T, p retention.Params) retention.Report {
	t.Helper()
	rep, err := retention.Maintain(t.Context(), b.pool, p)
	require.NoError(t, err)
	return rep
}

func name(table string, day time.Time) string { return table + "_p" + day.UTC().Format("20060102") }

func tableReport(t *testing.T, rep retention.Report, table string) retention.TableReport {
	t.Helper()
	for _, tr := range rep.Tables {
		if tr.Table == table {
			return tr
		}
	}
	t.Fatalf("no report of %s in %+v", table, rep)
	return retention.TableReport{}
}
