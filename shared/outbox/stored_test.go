package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
)

// A relay claims rows with its own statement and RETURNING outbox.Columns.
func TestScanStoredAfterClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	events := []outbox.Event{normalEvent(t), fifoEvent(t), delayEvent(t, 10*time.Minute)}
	write(t, b.pool, events...)

	rows, err := b.pool.Query(t.Context(), `
		UPDATE outbox_events SET publish_attempts = publish_attempts + 1,
			lease_owner = 'relay-1', lease_until = now() + interval '30 seconds'
		WHERE event_id IN (
			SELECT event_id FROM outbox_events
			WHERE published_at IS NULL AND available_at <= now()
			ORDER BY available_at, created_at
			LIMIT 10
			FOR UPDATE SKIP LOCKED)
		RETURNING `+outbox.Columns)
	require.NoError(t, err)
	claimed, err := outbox.Scan(rows)
	require.NoError(t, err)
	require.Len(t, claimed, len(events))
	for _, s := range claimed {
		require.Equal(t, 1, s.PublishAttempts)
		require.NoError(t, s.Envelope.Validate())
	}
}

// A row whose topic left the catalog still tells the relay how to send it.
func TestScanStoredUnknownTopic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	fifo, delay, normal := fifoEvent(t), delayEvent(t, time.Minute), normalEvent(t)
	write(t, b.pool, fifo, delay, normal)
	_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET topic = 'retired.' || event_id`)
	require.NoError(t, err)

	byID := map[string]catalog.Topic{}
	for _, s := range readAll(t, b.pool) {
		byID[s.Envelope.EventID] = s.Topic
	}
	for _, tc := range []struct {
		event outbox.Event
		want  catalog.MessageType
	}{{fifo, catalog.FIFO}, {delay, catalog.Delay}, {normal, catalog.Normal}} {
		id := tc.event.Envelope.EventID
		require.Equal(t, catalog.Topic{Name: "retired." + id, Type: tc.want}, byID[id])
	}
}
