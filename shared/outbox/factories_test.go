package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
)

type testBundle struct {
	pool *pgxpool.Pool
}

// setup gives the test its own migrated schema: the tests commit, read from
// other connections and count every row.
func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{pool: dbtest.TestSchema(t)}
}

// newEnvelope returns a valid envelope with every field set; edit may change
// it before it is validated.
func newEnvelope(t *testing.T, edit ...func(*envelope.NewParams)) envelope.Envelope {
	t.Helper()
	taskID := uuid.NewString()
	p := envelope.NewParams{
		EventType:     catalog.EventSubmitRequested,
		Producer:      "api",
		AggregateType: "generation_task",
		AggregateID:   taskID,
		TenantID:      uuid.NewString(),
		TraceID:       "4bf92f3577b34da6a3ce929d0e0e4736",
		CorrelationID: "req-" + uuid.NewString()[:8],
		CausationID:   uuid.NewString(),
		Payload:       map[string]any{"task_id": taskID, "version": 1},
	}
	for _, f := range edit {
		f(&p)
	}
	e, err := envelope.New(p)
	require.NoError(t, err)
	return e
}

func normalEvent(t *testing.T) outbox.Event {
	t.Helper()
	return outbox.Event{Envelope: newEnvelope(t), Topic: catalog.GenerationSubmit}
}

func fifoEvent(t *testing.T) outbox.Event {
	t.Helper()
	e := newEnvelope(t, func(p *envelope.NewParams) { p.EventType = catalog.EventTaskStateChanged })
	return outbox.Event{Envelope: e, Topic: catalog.GenerationStateFIFO, MessageGroup: e.AggregateID}
}

func delayEvent(t *testing.T, in time.Duration) outbox.Event {
	t.Helper()
	e := newEnvelope(t, func(p *envelope.NewParams) { p.EventType = catalog.EventPollDue })
	return outbox.Event{
		Envelope:  e,
		Topic:     catalog.GenerationPollDelay,
		DeliverAt: time.Now().Add(in).UTC().Truncate(time.Microsecond),
	}
}

// write writes events in a transaction of its own and commits it.
func write(t *testing.T, pool *pgxpool.Pool, events ...outbox.Event) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		return outbox.Write(t.Context(), tx, events...)
	}))
}

// readAll reads every outbox row in the order written.
func readAll(t *testing.T, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) []outbox.Stored {
	t.Helper()
	rows, err := q.Query(t.Context(), "SELECT "+outbox.Columns+" FROM outbox_events ORDER BY created_at, event_id")
	require.NoError(t, err)
	stored, err := outbox.Scan(rows)
	require.NoError(t, err)
	return stored
}

// count counts the rows with the given event ids, or all rows when none is
// given.
func count(t *testing.T, q outbox.Querier, ids ...string) int {
	t.Helper()
	var n int
	if len(ids) == 0 {
		require.NoError(t, q.QueryRow(t.Context(), "SELECT count(*) FROM outbox_events").Scan(&n))
		return n
	}
	require.NoError(t, q.QueryRow(t.Context(), "SELECT count(*) FROM outbox_events WHERE event_id = ANY($1::uuid[])", ids).Scan(&n))
	return n
}
