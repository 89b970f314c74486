package migrations_test

import (
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/migrations"
	"github.com/aivedio/pipeline/shared/dbtest"
)

// TestQuarantineTriageKeepsExistingRows: migration 11 gives rows written
// before it their failure times, a category and a payload hash, and folds
// the copies of one event and payload into one row under the seed's key,
// the open one kept; down and up again work on that data.
func TestQuarantineTriageKeepsExistingRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	url := schemaURL(t, pool)
	require.NoError(t, migrations.To(ctx, url, 10))

	event := uuid.New()
	insert := func(messageID, class, code, status string, attempt int, body string, age string) {
		_, err := pool.Exec(ctx, `INSERT INTO message_quarantine (consumer_name, event_id, message_id, topic, error_class, error_code,
				delivery_attempt, body, source, status, received_at)
			VALUES ('cg.asset.fetch.v1', $1, $2, 'asset.fetch', $3, $4, $5, $6, 'ADAPTER', $7, now() - $8::interval)`,
			event, messageID, class, code, attempt, []byte(body), status, age)
		require.NoError(t, err)
	}
	insert("m-replayed", "permanent", "security.tenant_mismatch", "REPLAYED", 1, `{"a":1}`, "2 hours")
	insert("m-open", "permanent", "security.tenant_mismatch", "QUARANTINED", 1, `{"a":1}`, "1 hour")
	insert("m-dlq", "dlq", "max_delivery_attempts", "QUARANTINED", 17, `{"a":2}`, "30 minutes")
	insert("m-gone", "permanent", "payload.invalid", "DISCARDED", 1, `{"a":3}`, "3 hours") // set by hand before discards were audited

	require.NoError(t, migrations.Up(ctx, url))
	type row struct {
		MessageID, Category, Status string
		Count                       int
		Hash                        []byte
		Span                        string
	}
	rows, err := pool.Query(ctx, `SELECT message_id, category, status, delivery_count, payload_hash, date_trunc('minute', last_failed_at - first_failed_at)::text
		FROM message_quarantine ORDER BY message_id`)
	require.NoError(t, err)
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.MessageID, &r.Category, &r.Status, &r.Count, &r.Hash, &r.Span))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	one, two, three := sha256.Sum256([]byte(`{"a":1}`)), sha256.Sum256([]byte(`{"a":2}`)), sha256.Sum256([]byte(`{"a":3}`))
	require.Equal(t, []row{
		{MessageID: "m-dlq", Category: "DEPENDENCY", Status: "QUARANTINED", Count: 17, Hash: two[:], Span: "00:00:00"},
		{MessageID: "m-gone", Category: "DATA_DEFECT", Status: "DISCARDED", Count: 1, Hash: three[:], Span: "00:00:00"},
		{MessageID: "m-open", Category: "PERMISSION", Status: "QUARANTINED", Count: 2, Hash: one[:], Span: "01:00:00"},
	}, got, "the two copies of one payload are one row: the open one, counted twice, failing from the first copy to the last")

	var by string
	require.NoError(t, pool.QueryRow(ctx, `SELECT discarded_by FROM message_quarantine WHERE status = 'DISCARDED'`).Scan(&by))
	require.Contains(t, by, "before migration 11", "an old discard says it was not audited")

	require.NoError(t, migrations.To(ctx, url, 10), "down to 10 with triaged rows")
	require.NoError(t, migrations.Up(ctx, url), "and up again")
}
