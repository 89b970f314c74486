package outbox_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/outbox"
)

func TestPending(t *testing.T) {
	t.Parallel()
	b := setup(t)

	n, oldest, err := outbox.Pending(t.Context(), b.pool)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, oldest)

	first, second, third := normalEvent(t), fifoEvent(t), delayEvent(t, time.Hour)
	write(t, b.pool, first, second, third)
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = now() - interval '90 seconds' WHERE event_id = $1`, second.Envelope.EventID)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE event_id = $1`, first.Envelope.EventID)
	require.NoError(t, err)

	n, oldest, err = outbox.Pending(t.Context(), b.pool)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.GreaterOrEqual(t, oldest, 90*time.Second)
	require.Less(t, oldest, 2*time.Minute)
}

func TestPendingFor(t *testing.T) {
	t.Parallel()
	b := setup(t)

	first, other := normalEvent(t), normalEvent(t)
	pending, err := outbox.PendingFor(t.Context(), b.pool, first.Envelope.AggregateID)
	require.NoError(t, err)
	require.False(t, pending, "nothing written yet")

	write(t, b.pool, first, other)
	pending, err = outbox.PendingFor(t.Context(), b.pool, first.Envelope.AggregateID)
	require.NoError(t, err)
	require.True(t, pending)

	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE event_id = $1`, first.Envelope.EventID)
	require.NoError(t, err)
	pending, err = outbox.PendingFor(t.Context(), b.pool, first.Envelope.AggregateID)
	require.NoError(t, err)
	require.False(t, pending, "published: no longer on its way, whatever other aggregates still wait")
	pending, err = outbox.PendingFor(t.Context(), b.pool, other.Envelope.AggregateID)
	require.NoError(t, err)
	require.True(t, pending)
}
