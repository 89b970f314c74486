package relay_test

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
)

// withIDAt gives e a UUIDv7 of at, so it lands in at's partition; a zero
// at gives it a UUIDv4, which lands in the default partition.
func withIDAt(t *testing.T, e outbox.Event, at time.Time) outbox.Event {
	t.Helper()
	id := uuid.New()
	if !at.IsZero() {
		var err error
		id, err = uuid.NewV7()
		require.NoError(t, err)
		var ms [8]byte
		binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
		copy(id[:6], ms[2:])
	}
	e.Envelope.EventID = id.String()
	return e
}

// TestFIFOAcrossPartitions: one message group whose events sit in four
// partitions (yesterday's, today's, the default, tomorrow's) is claimed
// and published in the order written, and every row is marked published
// in the partition it lives in.
func TestFIFOAcrossPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	now := time.Now().UTC()
	var written []outbox.Event
	for _, at := range []time.Time{now.Add(-24 * time.Hour), now, {}, now.Add(24 * time.Hour)} {
		e := withIDAt(t, event(t, catalog.GenerationStateFIFO, "fifo", "task-a", time.Time{}), at)
		written = append(written, e)
		b.write(t, e) // one transaction each: created_at grows in this order
	}
	var parts []string
	for _, e := range written {
		var p string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM outbox_events WHERE event_id = $1`, e.Envelope.EventID).Scan(&p))
		parts = append(parts, p)
	}
	require.Equal(t, []string{"outbox_events_p" + now.AddDate(0, 0, -1).Format("20060102"), "outbox_events_p" + now.Format("20060102"),
		"outbox_events_default", "outbox_events_p" + now.AddDate(0, 0, 1).Format("20060102")}, parts)

	r := b.relay("r1")
	for range len(written) + 1 {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
	}
	got := b.receiveAll(t, "g_test_fifo", catalog.GenerationStateFIFO)
	require.Len(t, got, len(written))
	for i, m := range got {
		require.Equal(t, written[i].Envelope.EventID, m.Keys[0], "the group in the order written")
	}
	var pending int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`).Scan(&pending))
	require.Zero(t, pending)
}
