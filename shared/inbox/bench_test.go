package inbox_test

import (
	"context"
	"strconv"
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

// A stage transaction as docs/design.md §9 measures it: inbox insert, a versioned
// update of the task, one downstream outbox event.

const benchTasks = 64

type benchTask struct {
	id      string
	version int
}

type benchBundle struct {
	pool     *pgxpool.Pool
	tasks    []benchTask
	next     int
	template envelope.Envelope
}

func setupBench(b *testing.B) *benchBundle {
	b.Helper()
	pool := dbtest.TestSchema(b)
	_, err := pool.Exec(b.Context(), `CREATE TABLE bench_tasks (task_id uuid PRIMARY KEY, version int NOT NULL)`)
	require.NoError(b, err)
	bb := &benchBundle{pool: pool}
	for range benchTasks {
		task := benchTask{id: uuid.NewString(), version: 1}
		_, err := pool.Exec(b.Context(), `INSERT INTO bench_tasks VALUES ($1, $2)`, task.id, task.version)
		require.NoError(b, err)
		bb.tasks = append(bb.tasks, task)
	}
	bb.template, err = envelope.New(envelope.NewParams{
		EventType:     catalog.EventFetchRequested,
		Producer:      "poll",
		AggregateType: "generation_task",
		AggregateID:   bb.tasks[0].id,
		TenantID:      uuid.NewString(),
		Payload:       map[string]any{},
	})
	require.NoError(b, err)
	return bb
}

// event returns an inbound event for the next task, carrying the version the
// handler expects.
func (bb *benchBundle) event(b *testing.B) (envelope.Envelope, *benchTask) {
	task := &bb.tasks[bb.next%len(bb.tasks)]
	bb.next++
	ev := bb.template
	ev.EventID = newID(b)
	ev.EventType = catalog.EventCallbackReceived
	ev.AggregateID = task.id
	ev.Payload = payload(task)
	return ev, task
}

func (bb *benchBundle) apply(ctx context.Context, tx pgx.Tx, ev envelope.Envelope, task *benchTask) (inbox.Result, error) {
	tag, err := tx.Exec(ctx, `UPDATE bench_tasks SET version = version + 1 WHERE task_id = $1 AND version = $2`, task.id, task.version)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return inbox.StaleNoop, nil
	}
	next := bb.template
	next.EventID = uuid.Must(uuid.NewV7()).String()
	next.AggregateID, next.CausationID = task.id, ev.EventID
	next.Payload = ev.Payload
	return inbox.Applied, outbox.Write(ctx, tx, outbox.Event{Envelope: next, Topic: catalog.AssetFetch})
}

func payload(task *benchTask) []byte {
	p := append([]byte(`{"task_id":"`), task.id...)
	p = append(p, `","version":`...)
	p = strconv.AppendInt(p, int64(task.version), 10)
	return append(p, '}')
}

func newID(b *testing.B) string {
	id, err := uuid.NewV7()
	if err != nil {
		b.Fatal(err)
	}
	return id.String()
}

func BenchmarkDo(b *testing.B) {
	bb := setupBench(b)
	ctx := b.Context()
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		ev, task := bb.event(b)
		out, err := inbox.Do(ctx, bb.pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
			return bb.apply(ctx, tx, ev, task)
		})
		if err != nil || out.Result != inbox.Applied {
			b.Fatalf("Do: %+v, %v", out, err)
		}
		task.version++
		events++
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDoBatch(b *testing.B) {
	const perTx = 16
	bb := setupBench(b)
	ctx := b.Context()
	evs := make([]envelope.Envelope, perTx)
	tasks := make(map[string]*benchTask, perTx)
	fn := func(ctx context.Context, tx pgx.Tx, ev envelope.Envelope) (inbox.Result, error) {
		return bb.apply(ctx, tx, ev, tasks[ev.EventID])
	}
	b.ReportAllocs()
	events := 0
	for b.Loop() {
		clear(tasks)
		for i := range evs {
			var task *benchTask
			evs[i], task = bb.event(b)
			tasks[evs[i].EventID] = task
		}
		outs, errs, err := inbox.DoBatch(ctx, bb.pool, consumer, evs, fn)
		if err != nil {
			b.Fatalf("DoBatch: %v", err)
		}
		for i, ev := range evs {
			if errs[i] != nil || outs[i].Result != inbox.Applied {
				b.Fatalf("DoBatch event %d: %+v, %v", i, outs[i], errs[i])
			}
			tasks[ev.EventID].version++
		}
		events += perTx
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(events), "ns/event")
}
