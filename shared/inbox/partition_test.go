package inbox_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/retention"
)

// TestRedeliveryADayLaterIsADuplicate: inbox_dedup is partitioned by the
// event id, so the row of an event made yesterday lives in yesterday's
// partition whenever it is processed, and a redelivery a day later (after
// maintenance has moved on a day) meets it there and is a duplicate. Were
// the inbox partitioned by processed_at, the redelivery would look in
// another partition and apply the event twice.
func TestRedeliveryADayLaterIsADuplicate(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var now time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	yesterday := now.UTC().AddDate(0, 0, -1)

	ev := newEvent(t)
	id := uuid.MustParse(ev.EventID)
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(yesterday.UnixMilli()))
	copy(id[:6], ms[2:])
	ev.EventID = id.String()
	h := &handler{}

	out, err := inbox.Do(ctx, b.pool, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.False(t, out.Duplicate)
	var partition string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM inbox_dedup WHERE event_id = $1`, id).Scan(&partition))
	require.Equal(t, "inbox_dedup_p"+yesterday.Format("20060102"), partition, "the event's day, not the day it was processed")

	// A day on: the reconcile tick's maintenance has run, and the row was
	// processed a day ago.
	_, err = retention.Maintain(ctx, b.pool, retention.Params{Now: now.Add(24 * time.Hour)})
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE inbox_dedup SET processed_at = processed_at - interval '1 day' WHERE event_id = $1`, id)
	require.NoError(t, err)

	out, err = inbox.Do(ctx, b.pool, consumer, ev, h.fn(ev))
	require.NoError(t, err)
	require.Equal(t, inbox.Outcome{Duplicate: true, Result: inbox.Applied}, out)
	require.EqualValues(t, 1, h.calls.Load(), "the redelivery must not run the function")
	require.Equal(t, 1, b.counter(t, ev.EventID))
}
