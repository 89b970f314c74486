package relay_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/retention"
)

// BenchmarkLogHistory shows that the hot path does not slow down as the
// outbox and the inbox fill with history (issue 13): the relay's
// claim-and-publish of a batch (relay-claim) and a stage transaction
// (inbox-do: inbox insert, versioned update, outbox insert, as
// BenchmarkDo of shared/inbox) with 0, 1 million and 10 million rows of
// history in each table. The history is published outbox rows and inbox
// rows with UUIDv7 ids spread over the last seven days, so they sit in
// the daily partitions the hot path's own rows do not touch. One schema
// is filled step by step, and each step is measured once: the history is
// built once per run.
//
// The relay publishes to a producer that only counts, so relay-claim is
// the PostgreSQL cost: the claim UPDATE, and marking the batch published.
func BenchmarkLogHistory(b *testing.B) {
	pool := dbtest.TestSchema(b)
	h := &history{pool: pool}
	// Untimed rounds first, so that history=0 is not also the measurement
	// of cold caches, connections and prepared statements.
	relayOnce, inboxOnce := relayStep(b, pool), inboxStep(b, pool)
	for range 50 {
		relayOnce()
		inboxOnce()
	}
	_, err := pool.Exec(b.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`)
	require.NoError(b, err)
	for _, level := range []struct {
		name string
		rows int
	}{{"0", 0}, {"1M", 1_000_000}, {"10M", 10_000_000}} {
		b.Run("history="+level.name, func(b *testing.B) {
			h.fill(b, level.rows) // runs once: a benchmark with sub-benchmarks is not repeated
			b.Run("relay-claim", func(b *testing.B) { benchRelayClaim(b, pool) })
			b.Run("inbox-do", func(b *testing.B) { benchInboxDo(b, pool) })
		})
	}
}

// history fills the outbox and the inbox of one schema.
type history struct {
	pool *pgxpool.Pool
	rows int // in each table so far
}

// historyDays are the days of history, the partitions of days -7 to -1.
const historyDays = 7

// fill adds rows to each table until each holds total rows of history.
// Each step writes its own slice of every day (the first million the
// first tenth of each day, the rest the other nine tenths), so that ids
// arrive in ascending order within a partition as they do in production,
// and each partition is written by one INSERT ... SELECT, two at a time
// (the machine's cores). 10 million rows a table take about four minutes
// on two cores.
func (h *history) fill(b *testing.B, total int) {
	b.Helper()
	if total <= h.rows {
		return
	}
	ctx := b.Context()
	start := time.Now()
	from, to := float64(h.rows)/float64(total), 1.0
	if h.rows == 0 {
		from = 0
	}
	add := total - h.rows
	perDay := add / historyDays
	var now time.Time
	require.NoError(b, h.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(2) // the machine's cores
	for d := 1; d <= historyDays; d++ {
		day := now.UTC().AddDate(0, 0, -d).Truncate(retention.Day)
		suffix := "_p" + day.Format("20060102")
		// Row g's id and time, computed once per row (LATERAL): the day's
		// start plus g's place in this step's slice of the day.
		rows := fmt.Sprintf(`generate_series(0, %d) g, LATERAL (SELECT
				(lpad(to_hex(ms), 12, '0') || '7' || substr(md5(g::text || '%s/%d'), 1, 19))::uuid AS id,
				to_timestamp(ms / 1000.0) AS at, 'task-' || (g %% 5000) AS task
			FROM (SELECT %d + ((%f + %f * g::float8 / %d) * 86400000)::bigint AS ms) m) s`,
			perDay-1, suffix, h.rows, day.UnixMilli(), from, to-from, perDay)
		// The hot path never writes these partitions: autovacuum would only
		// add noise to the timing.
		for _, table := range []string{"outbox_events", "inbox_dedup"} {
			_, err := h.pool.Exec(ctx, `ALTER TABLE `+table+suffix+` SET (autovacuum_enabled = off)`)
			require.NoError(b, err)
		}
		g.Go(func() error {
			_, err := h.pool.Exec(gctx, `INSERT INTO outbox_events`+suffix+`
				(event_id, event_type, producer, topic, tag, message_group, aggregate_type, aggregate_id, tenant_id, payload,
					occurred_at, created_at, available_at, published_at, publish_attempts)
				SELECT s.id, 'task.state.changed', 'submit', 'generation.state.fifo', 'task.state.changed', s.task,
					'generation_task', s.task, '6f1e7c43-1111-4d7e-9e55-2a1c0b7d5e01',
					'{"task_id": "task-1234", "status": "SUBMITTING", "version": 3}', s.at, s.at, s.at, s.at + interval '40 milliseconds', 1
				FROM `+rows)
			if err != nil {
				return fmt.Errorf("fill outbox_events%s: %w", suffix, err)
			}
			return nil
		})
		g.Go(func() error {
			_, err := h.pool.Exec(gctx, `INSERT INTO inbox_dedup`+suffix+` (consumer_name, event_id, result_code, payload_hash, processed_at)
				SELECT 'cg.notification.push.v1', s.id, 'APPLIED', decode(md5(s.id::text) || md5(s.task), 'hex'), s.at + interval '90 milliseconds'
				FROM `+rows)
			if err != nil {
				return fmt.Errorf("fill inbox_dedup%s: %w", suffix, err)
			}
			return nil
		})
	}
	require.NoError(b, g.Wait())
	// The statistics autovacuum would have gathered by then, for the
	// planner; and a checkpoint, so that writing back gigabytes of rows
	// loaded in one burst (production accrues them over days) does not
	// slow the commits being timed. CHECKPOINT needs pg_checkpoint, which
	// the test services' user has.
	_, err := h.pool.Exec(ctx, `ANALYZE outbox_events, inbox_dedup`)
	require.NoError(b, err)
	_, err = h.pool.Exec(ctx, `CHECKPOINT`)
	require.NoError(b, err)
	h.rows += perDay * historyDays
	b.Logf("history: %d rows in each of outbox_events and inbox_dedup (%s to add %d)", h.rows, time.Since(start).Round(time.Second), perDay*historyDays)
}

// countingProducer stores nothing: the relay's cost without a broker's.
type countingProducer struct{ n int }

func (p *countingProducer) Send(context.Context, *mq.Message) (string, error) {
	p.n++ // one relay: its sends are not concurrent with the reads below
	return strconv.Itoa(p.n), nil
}

const benchBatch = 64

// benchRelayClaim measures RunOnce on a due batch of benchBatch events,
// written before each iteration outside the timing.
func benchRelayClaim(b *testing.B, pool *pgxpool.Pool) {
	step := relayStep(b, pool)
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/batch")
}

// relayStep returns one round of benchRelayClaim: write a batch (the timer
// stopped), then claim and publish it.
func relayStep(b *testing.B, pool *pgxpool.Pool) func() {
	ctx := b.Context()
	r := relay.New(relay.Params{Pool: pool, Producer: &countingProducer{}, Owner: "bench", Batch: benchBatch, Publishers: 1})
	template, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventCallbackReceived, Producer: "bench", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: map[string]any{"status": "succeeded"},
	})
	require.NoError(b, err)
	events := make([]outbox.Event, benchBatch)
	return func() {
		b.StopTimer()
		for i := range events {
			env := template
			env.EventID = uuid.Must(uuid.NewV7()).String()
			events[i] = outbox.Event{Envelope: env, Topic: catalog.GenerationCallback}
		}
		require.NoError(b, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, events...) }))
		b.StartTimer()
		n, err := r.RunOnce(ctx)
		if err != nil || n != benchBatch {
			b.Fatalf("RunOnce: %d rows, %v", n, err)
		}
	}
}

// benchInboxDo measures one stage transaction per iteration, as
// shared/inbox's BenchmarkDo: the inbox insert, a versioned update, one
// downstream outbox event. Its outbox rows are marked published after, so
// the next relay-claim finds only its own batches.
func benchInboxDo(b *testing.B, pool *pgxpool.Pool) {
	step := inboxStep(b, pool)
	b.ReportAllocs()
	for b.Loop() {
		step()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/tx")
	_, err := pool.Exec(b.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`)
	require.NoError(b, err)
}

// inboxStep returns one round of benchInboxDo over its own 64 tasks.
func inboxStep(b *testing.B, pool *pgxpool.Pool) func() {
	ctx := b.Context()
	const tasks = 64
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_tasks (task_id uuid PRIMARY KEY, version int NOT NULL)`)
	require.NoError(b, err)
	ids := make([]uuid.UUID, tasks)
	versions := make([]int, tasks)
	for i := range ids {
		ids[i], versions[i] = uuid.New(), 1
		_, err := pool.Exec(ctx, `INSERT INTO bench_tasks VALUES ($1, 1)`, ids[i])
		require.NoError(b, err)
	}
	template, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventCallbackReceived, Producer: "poll", AggregateType: "generation_task",
		AggregateID: ids[0].String(), TenantID: uuid.NewString(), Payload: map[string]any{},
	})
	require.NoError(b, err)
	next := 0
	return func() {
		i := next % tasks
		next++
		ev := template
		ev.EventID = uuid.Must(uuid.NewV7()).String()
		ev.AggregateID = ids[i].String()
		ev.Payload = []byte(`{"task_id":"` + ids[i].String() + `","version":` + strconv.Itoa(versions[i]) + `}`)
		out, err := inbox.Do(ctx, pool, "cg.callback.apply.v1", ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
			tag, err := tx.Exec(ctx, `UPDATE bench_tasks SET version = version + 1 WHERE task_id = $1 AND version = $2`, ids[i], versions[i])
			if err != nil || tag.RowsAffected() == 0 {
				return inbox.StaleNoop, err
			}
			down := template
			down.EventID = uuid.Must(uuid.NewV7()).String()
			down.AggregateID, down.CausationID, down.Payload = ev.AggregateID, ev.EventID, ev.Payload
			return inbox.Applied, outbox.Write(ctx, tx, outbox.Event{Envelope: down, Topic: catalog.AssetFetch})
		})
		if err != nil || out.Result != inbox.Applied {
			b.Fatalf("Do: %+v, %v", out, err)
		}
		versions[i]++
	}
}
