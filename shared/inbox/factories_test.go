package inbox_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
)

const consumer = "cg.scheduler.submit.v1"

type testBundle struct {
	pool *pgxpool.Pool
}

// setup gives the test its own migrated schema with a counters table that
// stands for the business effect: a handler adds one to a counter, so a
// count above one is an effect applied twice.
func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.TestSchema(t)
	_, err := pool.Exec(t.Context(), `CREATE TABLE counters (name text PRIMARY KEY, n int NOT NULL DEFAULT 0)`)
	require.NoError(t, err)
	return &testBundle{pool: pool}
}

// newEvent returns a valid generation.submit.requested envelope for a new
// task.
func newEvent(t *testing.T) envelope.Envelope {
	t.Helper()
	taskID := uuid.NewString()
	e, err := envelope.New(envelope.NewParams{
		EventType:     catalog.EventSubmitRequested,
		Producer:      "api",
		AggregateType: "generation_task",
		AggregateID:   taskID,
		TenantID:      uuid.NewString(),
		Payload:       map[string]any{"task_id": taskID, "version": 1},
	})
	require.NoError(t, err)
	return e
}

// handler is a Func that counts its calls and, inside the transaction, adds
// one to the counter named after the event and writes a downstream event.
type handler struct {
	calls  atomic.Int32
	result inbox.Result
	err    error // returned after the work, so the work must roll back
}

func (h *handler) apply(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (inbox.Result, error) {
	h.calls.Add(1)
	if err := increment(ctx, tx, ev.EventID); err != nil {
		return "", err
	}
	next, err := envelope.New(envelope.NewParams{
		EventType:     catalog.EventTaskStateChanged,
		Producer:      "submit",
		AggregateType: ev.AggregateType,
		AggregateID:   ev.AggregateID,
		TenantID:      ev.TenantID,
		CausationID:   ev.EventID,
		Payload:       map[string]any{"task_id": ev.AggregateID, "status": "SUBMITTING", "version": 2},
	})
	if err != nil {
		return "", err
	}
	if err := outbox.Write(ctx, tx, outbox.Event{Envelope: next, Topic: catalog.GenerationStateFIFO, MessageGroup: ev.AggregateID}); err != nil {
		return "", err
	}
	if h.err != nil {
		return "", h.err
	}
	if h.result == "" {
		return inbox.Applied, nil
	}
	return h.result, nil
}

// fn binds the handler to one event, for inbox.Do.
func (h *handler) fn(ev envelope.Envelope) inbox.Func {
	return func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) { return h.apply(ctx, tx, ev) }
}

func increment(ctx context.Context, tx pgx.Tx, name string) error {
	_, err := tx.Exec(ctx, `INSERT INTO counters (name, n) VALUES ($1, 1) ON CONFLICT (name) DO UPDATE SET n = counters.n + 1`, name)
	return err
}

// counter returns how often the effect of the named counter committed.
func (b *testBundle) counter(t *testing.T, name string) int {
	t.Helper()
	var n int
	err := b.pool.QueryRow(t.Context(), `SELECT n FROM counters WHERE name = $1`, name).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// outboxCount counts the downstream events caused by eventID.
func (b *testBundle) outboxCount(t *testing.T, eventID string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE causation_id = $1`, eventID).Scan(&n))
	return n
}

// recorded returns the inbox row of (consumer, event id), or ok false.
func (b *testBundle) recorded(t *testing.T, consumer, eventID string) (result string, hash []byte, ok bool) {
	t.Helper()
	err := b.pool.QueryRow(t.Context(), `SELECT result_code, payload_hash FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`,
		consumer, eventID).Scan(&result, &hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, false
	}
	require.NoError(t, err)
	return result, hash, true
}

func payloadHash(ev envelope.Envelope) []byte {
	sum := sha256.Sum256(ev.Payload)
	return sum[:]
}
