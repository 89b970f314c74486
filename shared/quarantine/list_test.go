package quarantine_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// deadLetter is a quarantine entry of consumer for an event, as the DLQ
// drain writes it: binary-mode CE_ properties and the payload as body.
func deadLetter(consumer, eventID, code string) quarantine.Entry {
	return quarantine.Entry{
		Consumer: consumer, EventID: eventID, MessageID: uuid.NewString(), Topic: "generation_submit",
		Tag: "generation.submit.requested", ErrorClass: "dlq", ErrorCode: code, DeliveryAttempt: 16,
		Properties: map[string]string{"CE_specversion": "1.0", "CE_id": eventID, "CE_type": "generation.submit.requested", "CE_subject": "task-1"},
		Body:       []byte(`{"task_id":"task-1"}`), Source: quarantine.SourceDLQ,
	}
}

func TestListSelectsAndReads(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	event := uuid.NewString()
	for _, e := range []quarantine.Entry{
		deadLetter("cg.scheduler.submit.v1", event, "max_delivery_attempts"),
		deadLetter("cg.provider.fetch.v1", event, "max_delivery_attempts"), // the same event in another group
		deadLetter("cg.scheduler.submit.v1", uuid.NewString(), "envelope.bad_id"),
	} {
		_, err := quarantine.Write(ctx, pool, e)
		require.NoError(t, err)
	}

	all, err := quarantine.List(ctx, pool, quarantine.Filter{})
	require.NoError(t, err)
	require.Len(t, all, 3)
	require.Equal(t, "generation.submit.requested", all[0].EventType, "from CE_type")
	require.Equal(t, "task-1", all[0].AggregateID, "from CE_subject")
	byCode, err := quarantine.List(ctx, pool, quarantine.Filter{ErrorCode: "envelope.*"})
	require.NoError(t, err)
	require.Len(t, byCode, 1)
	byGroup, err := quarantine.List(ctx, pool, quarantine.Filter{Consumer: "cg.provider.fetch.v1", ErrorClass: "dlq"})
	require.NoError(t, err)
	require.Len(t, byGroup, 1)
	none, err := quarantine.List(ctx, pool, quarantine.Filter{Status: "replayed"})
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = quarantine.List(ctx, pool, quarantine.Filter{Status: "LOST"})
	require.ErrorIs(t, err, quarantine.ErrInvalid)

	whole, err := quarantine.Read(ctx, pool, byGroup[0].QuarantineID)
	require.NoError(t, err)
	require.Equal(t, `{"task_id":"task-1"}`, string(whole.Body))
	require.Equal(t, event, whole.Properties["CE_id"])
	_, err = quarantine.Read(ctx, pool, uuid.New())
	require.ErrorIs(t, err, quarantine.ErrNotFound)

	found, err := quarantine.OfEvent(ctx, pool, uuid.MustParse(event), "")
	require.NoError(t, err)
	require.Len(t, found, 2)
	found, err = quarantine.OfEvent(ctx, pool, uuid.MustParse(event), "cg.provider.fetch.v1")
	require.NoError(t, err)
	require.Len(t, found, 1)

	// Find takes a quarantine id or an event id; an event of two groups
	// needs the group.
	one, err := quarantine.Find(ctx, pool, byGroup[0].QuarantineID, "")
	require.NoError(t, err)
	require.Equal(t, byGroup[0].QuarantineID, one.QuarantineID)
	_, err = quarantine.Find(ctx, pool, uuid.MustParse(event), "")
	require.ErrorIs(t, err, quarantine.ErrAmbiguous)
	require.ErrorContains(t, err, "cg.provider.fetch.v1")
	one, err = quarantine.Find(ctx, pool, uuid.MustParse(event), "cg.provider.fetch.v1")
	require.NoError(t, err)
	require.Equal(t, found[0].QuarantineID, one.QuarantineID)
	_, err = quarantine.Find(ctx, pool, uuid.New(), "")
	require.ErrorIs(t, err, quarantine.ErrNotFound)
}

func TestSelectEventsCountsCopiesOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := dbtest.TestSchema(t)
	event := uuid.NewString()
	first := deadLetter("cg.scheduler.submit.v1", event, "max_delivery_attempts")
	again := first
	// The same event under another payload: a row of its own.
	again.MessageID, again.ErrorClass, again.Source = uuid.NewString(), "permanent", quarantine.SourceAdapter
	again.Body = []byte(`{"task_id":"task-1","reused":true}`)
	for _, e := range []quarantine.Entry{first, again, deadLetter("cg.scheduler.submit.v1", uuid.NewString(), "x.y")} {
		_, err := quarantine.Write(ctx, pool, e)
		require.NoError(t, err)
	}
	f, err := quarantine.Filter{Consumer: "cg.scheduler.submit.v1"}.Normalize()
	require.NoError(t, err)
	sel, err := quarantine.SelectEvents(ctx, pool, f)
	require.NoError(t, err)
	require.Equal(t, 3, sel.Matched)
	require.Equal(t, 2, sel.Events)
	require.Len(t, sel.Oldest, 2)
	require.Equal(t, event, sel.Oldest[0].EventID)
	require.Equal(t, "dlq", sel.Oldest[0].ErrorClass, "the oldest copy")

	copies, err := quarantine.Copies(ctx, pool, sel.Oldest[0].Message)
	require.NoError(t, err)
	require.Len(t, copies, 1)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	n, err := quarantine.MarkReplayed(ctx, tx, "cg.scheduler.submit.v1", event)
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	require.NoError(t, tx.Commit(ctx))
	left, err := quarantine.SelectEvents(ctx, pool, f)
	require.NoError(t, err)
	require.Equal(t, 1, left.Events)
}

func TestFilterBounds(t *testing.T) {
	t.Parallel()
	f, err := quarantine.Filter{Status: " all "}.Normalize()
	require.NoError(t, err)
	require.Equal(t, quarantine.AnyStatus, f.Status)
	require.Equal(t, quarantine.DefaultLimit, f.Limit)
	for _, f := range []quarantine.Filter{
		{Limit: quarantine.MaxLimit + 1},
		{Limit: -1},
		{Status: "LOST"},
		{Since: time.Now(), Until: time.Now().Add(-time.Hour)},
		{ErrorCode: "a*b"},
	} {
		_, err := f.Normalize()
		require.ErrorIs(t, err, quarantine.ErrInvalid, "%+v", f)
	}
}

func TestParseTime(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-11-30T08:00:00Z":      time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC),
		"2026-11-30T09:00:00+01:00": time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC),
		"90m":                       now.Add(-90 * time.Minute),
		"7d":                        now.Add(-7 * 24 * time.Hour),
	} {
		got, err := quarantine.ParseTime(in, now)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "yesterday", "-5m", "2026-11-30"} {
		_, err := quarantine.ParseTime(in, now)
		require.ErrorIs(t, err, quarantine.ErrInvalid, in)
	}
}

// FuzzParseTime: never panics; an accepted time is UTC and not after now
// when given as an age.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-30T08:00:00Z", "90m", "7d", "", "-1h", "1e9d", "2026-11-30"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := quarantine.ParseTime(s, now)
		if err != nil {
			require.ErrorIs(t, err, quarantine.ErrInvalid)
			return
		}
		require.Equal(t, time.UTC, got.Location())
		if _, rfc := time.Parse(time.RFC3339Nano, s); rfc != nil {
			require.False(t, got.After(now), "an age lies in the past")
		}
	})
}
