package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
)

func TestWriteRoundTrip(t *testing.T) {
	t.Parallel()
	b := setup(t)

	tagged := normalEvent(t)
	tagged.Topic, tagged.Tag = catalog.AssetPostprocess, catalog.TagProbe
	bare := normalEvent(t)
	bare.Envelope.TraceID, bare.Envelope.CorrelationID, bare.Envelope.CausationID = "", "", ""
	events := []outbox.Event{normalEvent(t), tagged, bare, fifoEvent(t), delayEvent(t, time.Hour)}
	before := time.Now()
	write(t, b.pool, events...)

	stored := readAll(t, b.pool)
	require.Len(t, stored, len(events))
	byID := map[string]outbox.Stored{}
	for _, s := range stored {
		byID[s.Envelope.EventID] = s
	}
	for _, e := range events {
		s, ok := byID[e.Envelope.EventID]
		require.True(t, ok, "event %s not read back", e.Envelope.EventID)
		want := e
		if want.Tag == "" {
			want.Tag = e.Envelope.EventType
		}
		require.Equal(t, want, s.Event)
		require.Equal(t, e.Envelope, s.Envelope, "the envelope must come back unchanged")
		require.Zero(t, s.PublishAttempts)
		require.WithinDuration(t, before, s.CreatedAt, time.Minute)
		require.Equal(t, time.UTC, s.CreatedAt.Location())
	}
	// What the relay does next must work on what it read.
	for _, s := range stored {
		_, err := s.Envelope.ToCloudEvent()
		require.NoError(t, err)
	}
}

func TestWriteStoresColumns(t *testing.T) {
	t.Parallel()
	tx := dbtest.TestTx(t)
	e := fifoEvent(t)
	require.NoError(t, outbox.Write(t.Context(), tx, e))

	var (
		topic, tag, group string
		tenantID          uuid.UUID
		traceID           string
		deliverAt         *time.Time
		headers           map[string]any
	)
	err := tx.QueryRow(t.Context(), `SELECT topic, tag, message_group, tenant_id, trace_id, deliver_at, headers
		FROM outbox_events WHERE event_id = $1`, e.Envelope.EventID).
		Scan(&topic, &tag, &group, &tenantID, &traceID, &deliverAt, &headers)
	require.NoError(t, err)
	require.Equal(t, "generation.state.fifo", topic, "the firm name, not the broker name")
	require.Equal(t, catalog.EventTaskStateChanged, tag)
	require.Equal(t, e.Envelope.AggregateID, group)
	require.Equal(t, e.Envelope.TenantID, tenantID.String())
	require.Equal(t, e.Envelope.TraceID, traceID)
	require.Nil(t, deliverAt)
	require.Empty(t, headers)
}

// jsonb keeps the value of the payload, not its spelling: what comes back is
// the same JSON value in the envelope's normal form, identical on every read.
func TestWritePayloadNormalForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := normalEvent(t)
	e.Envelope.Payload = json.RawMessage(`{"version":2,"task_id":"t-1","note":"\u003cb\u003e & é","nested":{"zz":1,"a":[1,2.50]}}`)
	write(t, b.pool, e)

	first, second := readAll(t, b.pool), readAll(t, b.pool)
	got := first[0].Envelope.Payload
	require.JSONEq(t, string(e.Envelope.Payload), string(got))
	require.Equal(t, `{"note":"\u003cb\u003e \u0026 é","nested":{"a":[1,2.50],"zz":1},"task_id":"t-1","version":2}`, string(got))
	require.Equal(t, got, second[0].Envelope.Payload)
	require.NoError(t, first[0].Envelope.Validate())
}

func TestWriteRejectsInvalidEvents(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		event func(t *testing.T) outbox.Event
		want  string
	}{
		{"FIFO without message group", func(t *testing.T) outbox.Event {
			e := fifoEvent(t)
			e.MessageGroup = ""
			return e
		}, `message_group is required on FIFO topic "generation.state.fifo"`},
		{"NORMAL with message group", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.MessageGroup = e.Envelope.AggregateID
			return e
		}, `message_group is set but topic "generation.submit" is NORMAL`},
		{"DELAY without deliver_at", func(t *testing.T) outbox.Event {
			e := delayEvent(t, time.Minute)
			e.DeliverAt = time.Time{}
			return e
		}, `deliver_at is required on DELAY topic "generation.poll.delay"`},
		{"DELAY beyond 24h", func(t *testing.T) outbox.Event {
			return delayEvent(t, 25*time.Hour)
		}, "beyond the broker's maximum delay of 24h0m0s"},
		{"NORMAL with deliver_at", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.DeliverAt = time.Now().Add(time.Minute)
			return e
		}, `deliver_at is set but topic "generation.submit" is NORMAL`},
		{"tenant not a UUID", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Envelope.TenantID = "tenant-42"
			return e
		}, `tenant_id "tenant-42" is not a lower-case canonical UUID`},
		{"tenant UUID in upper case", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Envelope.TenantID = strings.ToUpper(e.Envelope.TenantID)
			return e
		}, "is not a lower-case canonical UUID"},
		{"invalid envelope", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Envelope.Producer = ""
			return e
		}, "envelope: producer: is required"},
		{"topic missing", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Topic = catalog.Topic{}
			return e
		}, "topic is required"},
		{"topic not in the catalog", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Topic = catalog.Topic{Name: "generation.submitted", Type: catalog.Normal}
			return e
		}, `topic "generation.submitted" is not in the catalog`},
		{"topic with another type", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Topic.Type = catalog.FIFO
			e.MessageGroup = "g"
			return e
		}, `topic "generation.submit" is NORMAL in the catalog, not "FIFO"`},
		{"tag with a separator", func(t *testing.T) outbox.Event {
			e := normalEvent(t)
			e.Tag = "PROBE||THUMBNAIL"
			return e
		}, `tag "PROBE||THUMBNAIL" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tx := dbtest.TestTx(t)
			valid, bad := normalEvent(t), tt.event(t)

			err := outbox.Write(t.Context(), tx, valid, bad)
			require.ErrorIs(t, err, outbox.ErrInvalidEvent)
			require.ErrorContains(t, err, tt.want)
			require.ErrorContains(t, err, `invalid outbox event "`+bad.Envelope.EventID+`" (events[1])`)
			require.Zero(t, count(t, tx, valid.Envelope.EventID, bad.Envelope.EventID), "nothing may be written")

			// Nothing was sent, so the transaction is still usable.
			require.NoError(t, outbox.Write(t.Context(), tx, valid))
			require.Equal(t, 1, count(t, tx, valid.Envelope.EventID))
		})
	}
}

func TestWriteInvalidEnvelopeKeepsItsClass(t *testing.T) {
	t.Parallel()
	e := normalEvent(t)
	e.Envelope.EventID = "not-a-uuid"
	err := outbox.Write(t.Context(), dbtest.TestTx(t), e)
	require.ErrorIs(t, err, outbox.ErrInvalidEvent)
	require.ErrorIs(t, err, envelope.ErrInvalid)
	class, ok := envelope.ClassOf(err)
	require.True(t, ok)
	require.Equal(t, envelope.ClassBadID, class)
}

func TestWriteDuplicateEvent(t *testing.T) {
	t.Parallel()

	t.Run("already stored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := normalEvent(t)
		write(t, b.pool, e)

		again := fifoEvent(t)
		again.Envelope.EventID = e.Envelope.EventID
		err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			return outbox.Write(t.Context(), tx, normalEvent(t), again)
		})
		require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
		require.ErrorContains(t, err, "duplicate outbox event "+e.Envelope.EventID+": an event with this id is already in outbox_events")
		var pgErr *pgconn.PgError
		require.True(t, errors.As(err, &pgErr))
		require.Equal(t, pgerrcode.UniqueViolation, pgErr.Code)
		require.Equal(t, 1, count(t, b.pool), "the other event of the failed call must not be stored")
	})

	t.Run("twice in one call", func(t *testing.T) {
		t.Parallel()
		tx := dbtest.TestTx(t)
		e := normalEvent(t)
		err := outbox.Write(t.Context(), tx, e, normalEvent(t), e)
		require.ErrorIs(t, err, outbox.ErrDuplicateEvent)
		require.ErrorContains(t, err, "events[0] and events[2] have the same event id")
		require.Zero(t, count(t, tx, e.Envelope.EventID))
	})
}

func TestWriteVisibility(t *testing.T) {
	t.Parallel()

	t.Run("invisible until commit", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(t.Context()) }()

		events := []outbox.Event{normalEvent(t), fifoEvent(t), delayEvent(t, time.Minute)}
		require.NoError(t, outbox.Write(t.Context(), tx, events...))
		require.Equal(t, 3, count(t, tx), "the writing transaction sees its rows")
		require.Zero(t, count(t, b.pool), "another connection must not see uncommitted rows")
		n, _, err := outbox.Pending(t.Context(), b.pool)
		require.NoError(t, err)
		require.Zero(t, n)

		require.NoError(t, tx.Commit(t.Context()))
		require.Equal(t, 3, count(t, b.pool))
	})

	t.Run("rolled back leaves nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		errBusiness := errors.New("business rule failed")
		err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			require.NoError(t, outbox.Write(t.Context(), tx, normalEvent(t), fifoEvent(t)))
			return errBusiness
		})
		require.ErrorIs(t, err, errBusiness)
		require.Zero(t, count(t, b.pool))
	})
}

func TestWriteNothing(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.Write(t.Context(), nil))
}

// TestCreatedAtFollowsInsertOrder: a transaction that began first but
// writes after another committed gets the later created_at, because the
// relay publishes a FIFO group in created_at order and transitions of one
// task write their events in row-lock order, not in begin order.
func TestCreatedAtFollowsInsertOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	early, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = early.Rollback(context.WithoutCancel(ctx)) }()
	_, err = early.Exec(ctx, `SELECT now()`) // fixes the early transaction's now()
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)

	first, second := fifoEvent(t), fifoEvent(t)
	second.MessageGroup = first.MessageGroup
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, first) }))
	require.NoError(t, outbox.Write(ctx, early, second))
	require.NoError(t, early.Commit(ctx))

	var order []string
	rows, err := b.pool.Query(ctx, `SELECT event_id::text FROM outbox_events ORDER BY created_at, event_id`)
	require.NoError(t, err)
	order, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{first.Envelope.EventID, second.Envelope.EventID}, order)
}

// TestWriteKeepsTheWritingSpan: an event written under a span of its own
// trace, or with no trace yet, stores that span as its traceparent (the
// parent of its handler's span); an event of another trace, or one that
// names its parent already, is stored as it came.
func TestWriteKeepsTheWritingSpan(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const spanTrace = "0af7651916cd43dd8448eb211c80319c"
	span := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: mustTraceID(t, spanTrace), SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(t.Context(), span)
	wantParent := "00-" + spanTrace + "-0102030405060708-01"

	untraced := normalEvent(t)
	untraced.Envelope.TraceID = ""
	sameTrace := normalEvent(t)
	sameTrace.Envelope.TraceID = spanTrace
	otherTrace := normalEvent(t) // newEnvelope's trace id
	named := normalEvent(t)
	named.Envelope.TraceID, named.Envelope.TraceParent = spanTrace, "00-"+spanTrace+"-00f067aa0ba902b7-00"
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return outbox.Write(ctx, tx, untraced, sameTrace, otherTrace, named)
	}))

	byID := map[string]envelope.Envelope{}
	for _, s := range readAll(t, b.pool) {
		byID[s.Envelope.EventID] = s.Envelope
	}
	for _, e := range []outbox.Event{untraced, sameTrace} {
		got := byID[e.Envelope.EventID]
		require.Equal(t, spanTrace, got.TraceID)
		require.Equal(t, wantParent, got.TraceParent)
		ev, err := got.ToCloudEvent()
		require.NoError(t, err)
		require.Equal(t, wantParent, ev.Extensions()[envelope.ExtTraceParent], "the handler's parent is the writing span")
	}
	require.Equal(t, otherTrace.Envelope, byID[otherTrace.Envelope.EventID], "another trace's event is left alone")
	require.Equal(t, named.Envelope, byID[named.Envelope.EventID], "a named parent is kept")
}

func mustTraceID(t *testing.T, s string) trace.TraceID {
	t.Helper()
	id, err := trace.TraceIDFromHex(s)
	require.NoError(t, err)
	return id
}
