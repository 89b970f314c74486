package quarantine_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/quarantine"
)

func TestWriteIsIdempotent(t *testing.T) {
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
		Properties:      map[string]string{"CE_id": "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f"},
		Body:            []byte(`{"x":1}`),
	}
	written, err := quarantine.Write(ctx, pool, entry)
	require.NoError(t, err)
	require.True(t, written)

	entry.DeliveryAttempt = 2 // the same message again, e.g. after a crash before ACK
	written, err = quarantine.Write(ctx, pool, entry)
	require.NoError(t, err)
	require.False(t, written)

	n, err := quarantine.Count(ctx, pool, "cg.asset.probe.v1")
	require.NoError(t, err)
	require.Equal(t, 1, n)

	var class, source string
	var attempt int
	require.NoError(t, pool.QueryRow(ctx, `SELECT error_class, source, delivery_attempt FROM message_quarantine`).Scan(&class, &source, &attempt))
	require.Equal(t, "permanent", class)
	require.Equal(t, "ADAPTER", source)
	require.Equal(t, 1, attempt, "the first record stays")
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
