package quarantine_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// TestWriteCountsRepeats: the same message again (its ACK was lost), or
// the same event and payload under another broker message id (the relay
// published it twice), is one row whose count and last failure move.
func TestWriteCountsRepeats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.TestSchema(t)
	entry := quarantine.Entry{
		Consumer:        "cg.asset.probe.v1",
		EventID:         "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f",
		MessageID:       "01AB",
		Topic:           "asset_postprocess",
		Tag:             "PROBE",
		ErrorCode:       "envelope.tenant_missing",
		ErrorDetail:     "envelope: tenantid: missing",
		DeliveryAttempt: 1,
		Keys:            []string{"0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f"},
		Properties:      map[string]string{"CE_id": "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f", "CE_schemaversion": "2"},
		Body:            []byte(`{"x":1}`),
	}
	written, err := quarantine.Write(ctx, pool, entry)
	require.NoError(t, err)
	require.True(t, written)

	entry.DeliveryAttempt = 2 // the same message again, e.g. after a crash before ACK
	written, err = quarantine.Write(ctx, pool, entry)
	require.NoError(t, err)
	require.False(t, written)

	entry.MessageID, entry.DeliveryAttempt = "01AD", 1 // the relay published the event twice
	written, err = quarantine.Write(ctx, pool, entry)
	require.NoError(t, err)
	require.False(t, written)

	n, err := quarantine.Count(ctx, pool, "cg.asset.probe.v1")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	all, err := quarantine.List(ctx, pool, quarantine.Filter{})
	require.NoError(t, err)
	require.Len(t, all, 1)
	m := all[0]
	require.Equal(t, "permanent", m.ErrorClass)
	require.Equal(t, "ADAPTER", m.Source)
	require.Equal(t, 3, m.DeliveryCount, "three failed deliveries")
	require.Equal(t, 2, m.DeliveryAttempt, "the highest attempt seen")
	require.Equal(t, "01AD", m.MessageID, "the latest message")
	require.False(t, m.LastFailedAt.Before(m.FirstFailedAt))
	require.Equal(t, 2, m.SchemaVersion, "from CE_schemaversion")
	require.Equal(t, "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f", m.MessageKey)
	sum := sha256.Sum256(entry.Body)
	require.Equal(t, hex.EncodeToString(sum[:]), m.PayloadHash)
	require.JSONEq(t, `{"x":1}`, string(m.Snapshot))
	require.Equal(t, quarantine.Permission, m.Category, "a missing tenant is a permission question")
	require.Equal(t, "team-media", m.Owner, "from the catalog")
	require.Equal(t, m.FirstFailedAt.Add(8*time.Hour), m.DueAt)
}

// TestDeadLetterKeepsTheHandlersLastError: the source adapter records each
// failed delivery; the dead letter's quarantine row takes the handler's
// last error, its first failure and its count from that record, categorized
// by it, and the record is gone. A message settled after failing forgets
// its record.
func TestDeadLetterKeepsTheHandlersLastError(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	f := quarantine.Failure{Consumer: "cg.asset.fetch.v1", MessageID: "m-1", EventID: uuid.NewString(), Code: "deliver.unreachable", Detail: "connection refused"}
	require.NoError(t, quarantine.RecordFailure(ctx, pool, f))
	f.Code, f.Detail = "provider.unavailable", "provider answered 503"
	for range 15 {
		require.NoError(t, quarantine.RecordFailure(ctx, pool, f))
	}
	last, found, err := quarantine.LastFailure(ctx, pool, f.Consumer, f.MessageID)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, 16, last.Count)
	require.Equal(t, "provider.unavailable", last.Code)

	written, err := quarantine.Write(ctx, pool, quarantine.Entry{
		Consumer: f.Consumer, EventID: f.EventID, MessageID: f.MessageID, Topic: "%DLQ%cg_asset_fetch_v1",
		ErrorClass: "dlq", ErrorCode: "max_delivery_attempts", DeliveryAttempt: 17, DeliveryCount: 16,
		Body: []byte(`{"task_id":"t"}`), Source: quarantine.SourceDLQ,
	})
	require.NoError(t, err)
	require.True(t, written)
	all, err := quarantine.List(ctx, pool, quarantine.Filter{})
	require.NoError(t, err)
	require.Len(t, all, 1)
	require.Equal(t, "provider.unavailable", all[0].LastErrorCode)
	require.Equal(t, "provider answered 503", all[0].LastError)
	require.Equal(t, quarantine.Dependency, all[0].Category)
	require.Equal(t, 16, all[0].DeliveryCount)
	require.Equal(t, last.FirstAt.UTC(), all[0].FirstFailedAt, "failing since its first delivery")
	_, found, err = quarantine.LastFailure(ctx, pool, f.Consumer, f.MessageID)
	require.NoError(t, err)
	require.False(t, found, "the record went with the write")

	other := quarantine.Failure{Consumer: f.Consumer, MessageID: "m-2", Code: "provider.unavailable"}
	require.NoError(t, quarantine.RecordFailure(ctx, pool, other))
	require.NoError(t, quarantine.ForgetFailure(ctx, pool, other.Consumer, other.MessageID))
	_, found, err = quarantine.LastFailure(ctx, pool, other.Consumer, other.MessageID)
	require.NoError(t, err)
	require.False(t, found)

	require.NoError(t, quarantine.RecordFailure(ctx, pool, other))
	_, err = pool.Exec(ctx, `UPDATE delivery_failures SET last_failed_at = now() - interval '8 days'`)
	require.NoError(t, err)
	pruned, err := quarantine.PruneFailures(ctx, pool, 7*24*time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned)
}

// TestDiscardIsAudited: a discard needs an open row, takes the event's
// other open rows with it, and records who, when, which ticket and why.
func TestDiscardIsAudited(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	event := uuid.NewString()
	a, b := deadLetter("cg.scheduler.submit.v1", event, "max_delivery_attempts"), deadLetter("cg.scheduler.submit.v1", event, "max_delivery_attempts")
	b.Body = []byte(`{"task_id":"task-1","again":true}`)
	for _, e := range []quarantine.Entry{a, b} {
		_, err := quarantine.Write(ctx, pool, e)
		require.NoError(t, err)
	}
	open, err := quarantine.List(ctx, pool, quarantine.Filter{})
	require.NoError(t, err)
	require.Len(t, open, 2)
	d := quarantine.Discard{At: time.Now().UTC().Truncate(time.Microsecond), Operator: "ana", Ticket: "OPS-7", Reason: "test traffic"}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	n, err := quarantine.MarkDiscarded(ctx, tx, open[0].QuarantineID, d)
	require.NoError(t, err)
	require.EqualValues(t, 2, n, "the event's other payload goes with it")
	require.NoError(t, tx.Commit(ctx))

	gone, err := quarantine.List(ctx, pool, quarantine.Filter{Status: quarantine.Discarded})
	require.NoError(t, err)
	require.Len(t, gone, 2)
	require.Equal(t, &d, gone[0].Discard)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = quarantine.MarkDiscarded(ctx, tx, open[0].QuarantineID, d)
	require.ErrorIs(t, err, quarantine.ErrNotOpen)
	require.ErrorContains(t, err, "DISCARDED")
	_, err = quarantine.MarkDiscarded(ctx, tx, uuid.New(), d)
	require.ErrorIs(t, err, quarantine.ErrNotFound)
}

// TestOpenCountsByCategoryAndDeadline: what the drainer exports for
// alerting.
func TestOpenCountsByCategoryAndDeadline(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	for _, code := range []string{"payload.invalid", "payload.invalid", "task.not_found"} {
		e := deadLetter("cg.scheduler.submit.v1", uuid.NewString(), code)
		e.ErrorClass, e.Source = "permanent", quarantine.SourceAdapter
		_, err := quarantine.Write(ctx, pool, e)
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `UPDATE message_quarantine SET first_failed_at = now() - interval '5 hours' WHERE error_code = 'task.not_found'`)
	require.NoError(t, err)
	counts, err := quarantine.OpenCounts(ctx, pool, "cg.scheduler.submit.v1", 4*time.Hour)
	require.NoError(t, err)
	require.Len(t, counts, 2)
	require.Equal(t, quarantine.DataDefect, counts[0].Category)
	require.Equal(t, 2, counts[0].Count)
	require.Zero(t, counts[0].Overdue)
	require.Equal(t, quarantine.DirtyHistory, counts[1].Category)
	require.Equal(t, 1, counts[1].Overdue)

	reg := prometheus.NewRegistry()
	reg.MustRegister(quarantine.Collector(pool, []catalog.Group{catalog.GroupSubmit}))
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP aivedio_quarantine_overdue Open messages past their consumer group's handling deadline (first failure plus the catalog's HandleWithin), by group and owner.
# TYPE aivedio_quarantine_overdue gauge
aivedio_quarantine_overdue{consumer_group="cg.scheduler.submit.v1",owner="team-generation"} 1
`), "aivedio_quarantine_overdue"))
	open, err := testutil.GatherAndCount(reg, "aivedio_quarantine_open")
	require.NoError(t, err)
	require.Equal(t, len(quarantine.Categories()), open, "every category is exported, zero or not")
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetName() {
			case "aivedio_quarantine_open":
				want := map[string]float64{"DATA_DEFECT": 2, "DIRTY_HISTORY": 1}[m.GetLabel()[0].GetValue()]
				require.Equal(t, want, m.GetGauge().GetValue(), "%v", m.GetLabel())
			case "aivedio_quarantine_oldest_open_age_seconds":
				require.InDelta(t, 5*3600, m.GetGauge().GetValue(), 60)
			}
		}
	}

	listed, err := quarantine.List(ctx, pool, quarantine.Filter{Category: "dirty_history"})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.True(t, listed[0].Overdue(time.Now()))
	_, err = quarantine.List(ctx, pool, quarantine.Filter{Category: "BAD_LUCK"})
	require.ErrorIs(t, err, quarantine.ErrInvalid)
}

// TestWriteTakesABodyOfControlBytes: the body that once made a snapshot
// too long for its column is quarantined like any other.
func TestWriteTakesABodyOfControlBytes(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	written, err := quarantine.Write(t.Context(), pool, quarantine.Entry{
		Consumer: "cg.asset.probe.v1", MessageID: "m-ctl", Topic: "asset_postprocess", ErrorCode: "not_cloudevent",
		ErrorDetail: "fetch https://u:secret@cdn/x?X-Amz-Signature=abc failed", Body: bytes.Repeat([]byte{0x01}, 4000),
	})
	require.NoError(t, err)
	require.True(t, written)
	var detail string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT error_detail FROM message_quarantine`).Scan(&detail))
	require.NotContains(t, detail, "secret", "error texts are redacted too")
	require.NotContains(t, detail, "abc")
}

func TestWriteKeepsMessagesWithoutEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.TestSchema(t)
	_, err := quarantine.Write(ctx, pool, quarantine.Entry{
		Consumer: "cg.asset.probe.v1", EventID: "not-a-uuid", MessageID: "01AC", Topic: "asset_postprocess",
		ErrorCode: "not_cloudevent", Body: []byte("garbage"), Source: quarantine.SourceDLQ,
	})
	require.NoError(t, err)
	var eventID *string
	var body []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT event_id::text, body FROM message_quarantine`).Scan(&eventID, &body))
	require.Nil(t, eventID)
	require.Equal(t, []byte("garbage"), body)

	_, err = quarantine.Write(ctx, pool, quarantine.Entry{Consumer: "c"})
	require.ErrorContains(t, err, "required")
}
