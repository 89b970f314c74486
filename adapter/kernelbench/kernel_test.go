//go:build !race

package kernelbench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
)

// The shape of the kernel benchmarks.
const (
	// kernelRound is how many events one b.Loop iteration of
	// BenchmarkKernel commits and waits for: ns/op is per round of this many
	// events, and events/s is the figure to read.
	kernelRound = 2000
	// kernelTx is how many events one producing transaction commits.
	kernelTx = 50
	// warmUp events run through a pipeline before the timer starts: they
	// open every connection, prepare every statement and fetch every route.
	warmUp = 256

	// The paced run: pacedTx events every pacedTick for pacedFor.
	pacedTick = 10 * time.Millisecond
	pacedTx   = 10
	pacedFor  = 3 * time.Second

	// settleTimeout bounds the wait for a round's last ACK.
	settleTimeout = time.Minute
)

// pipelineParams sizes one kernel: the relay, the source and their pools.
type pipelineParams struct {
	group catalog.Group
	// Relay: rows per claim and concurrent sends, on relayConns
	// connections (one of which its LISTEN keeps).
	batch, publishers int
	relayConns        int32
	// Source: receiving consumers, delivery workers and the handler's pool.
	consumers, workers int
	sourceConns        int32
	// batched runs the handler through inbox.DoBatch, gathering concurrent
	// deliveries into one transaction; zero runs inbox.Do per event.
	batched int
}

// kernelParams are the sizes the kernel benchmarks run with, the best of a
// sweep on this 2-core machine, where the kernel is CPU-bound:
//
//   - 16 publishers, not 8: with 8 the relay is the bottleneck (every
//     publisher busy most of the time, at a few ms per send), and events
//     queue in the outbox;
//   - one consumer, not several: the group's single Receive asks for up to
//     32 messages, and fewer, larger pops cost the proxy less CPU per
//     message than several consumers' concurrent ones, which gained
//     nothing once the CPU was the limit;
//   - 32 workers on 16 connections: 16 workers left the source short of
//     concurrency, and PostgreSQL slows past about 16 connections.
func kernelParams(group catalog.Group) pipelineParams {
	return pipelineParams{
		group: group,
		batch: 64, publishers: 16, relayConns: 4,
		consumers: 1, workers: 32, sourceConns: 16,
	}
}

// pipeline is a running kernel: outbox → relay → RocketMQ → source →
// inbox.Do → ACK, on a schema of its own.
type pipeline struct {
	params  pipelineParams
	writer  *pgxpool.Pool // the producer's pool
	tag     string
	tenant  string
	track   *tracker
	sends   *timedProducer
	batcher *batcher // nil unless params.batched
}

// startPipeline starts a relay and a source on a fresh schema and stops
// them in cleanup, before their pools and clients close.
func startPipeline(b *testing.B, p pipelineParams) *pipeline {
	b.Helper()
	cfg := rocketmqtest.Config(b)
	base := dbtest.TestSchema(b)
	_, err := base.Exec(b.Context(), `CREATE TABLE kb_counters (id uuid PRIMARY KEY, version int NOT NULL)`)
	if err != nil {
		b.Fatalf("create kb_counters: %v", err)
	}
	pl := &pipeline{
		params: p,
		writer: newPool(b, base, 2),
		tag:    rocketmqtest.UniqueName("kb"),
		tenant: uuid.NewString(),
		track:  newTracker(kernelSegments),
		sends:  &timedProducer{Producer: newProducer(b, cfg)},
	}
	relayPool, sourcePool := newPool(b, base, p.relayConns), newPool(b, base, p.sourceConns)
	consumers := newConsumers(b, cfg, p.group, pl.tag, p.consumers, pl.track)

	var deliverer delivery.Deliverer = delivery.Func(pl.handle(sourcePool))
	if p.batched > 0 {
		pl.batcher = newBatcher(pl, sourcePool, p.batched)
		b.Cleanup(pl.batcher.stop)
		deliverer = delivery.Func(pl.batcher.handle)
	}
	r := relay.New(relay.Params{
		Pool: relayPool, Producer: pl.sends, Owner: "kernelbench-" + pl.tag,
		Batch: p.batch, Publishers: p.publishers,
	})
	s := source.New(source.Params{
		Group: p.group, Consumers: consumers, Quarantine: sourcePool,
		Deliverer: timedDeliverer{Deliverer: deliverer, track: pl.track},
		Workers:   p.workers,
	})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = r.Run(ctx) })
	wg.Go(func() { _ = s.Run(ctx) })
	// Registered last, so it runs first: stop intake and drain, then the
	// clients and pools registered above close.
	b.Cleanup(func() { cancel(); wg.Wait() })
	return pl
}

// handle is the stage: one inbox-protected transaction whose only work is
// a versioned update of the event's counter row.
func (pl *pipeline) handle(pool *pgxpool.Pool) func(context.Context, event.Event) (*event.Event, error) {
	return func(ctx context.Context, ev event.Event) (*event.Event, error) {
		env, err := envelope.FromCloudEvent(ev)
		if err != nil {
			return nil, err
		}
		out, err := inbox.Do(ctx, pool, pl.params.group.Name, env, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
			return bump(ctx, tx, env)
		})
		if err != nil {
			return nil, err
		}
		pl.count(out)
		return nil, nil
	}
}

// bump applies one event: UPDATE ... WHERE version = expected, as a stage
// moves a task.
func bump(ctx context.Context, tx pgx.Tx, env envelope.Envelope) (inbox.Result, error) {
	var p payload
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE kb_counters SET version = version + 1 WHERE id = $1 AND version = $2`, p.ID, p.V)
	if err != nil {
		return "", err
	}
	if tag.RowsAffected() == 0 {
		return inbox.StaleNoop, nil
	}
	return inbox.Applied, nil
}

// count notes deliveries that did not apply their event: the benchmark
// fails on any.
func (pl *pipeline) count(out inbox.Outcome) {
	switch {
	case out.Duplicate:
		pl.track.dups.Add(1)
	case out.Result == inbox.StaleNoop:
		pl.track.stale.Add(1)
	}
}

// commit commits n events and their counter rows in one transaction, as an
// API call creates a task and announces it.
func (pl *pipeline) commit(ctx context.Context, n int) error {
	ids := make([]uuid.UUID, n)
	events := make([]outbox.Event, n)
	now := time.Now().UnixNano()
	for i := range events {
		ids[i] = uuid.Must(uuid.NewV7())
		env, err := envelope.New(envelope.NewParams{
			EventType: catalog.EventCallbackReceived, Producer: "kernelbench",
			AggregateType: "kb_counter", AggregateID: ids[i].String(), TenantID: pl.tenant,
			Payload: payload{ID: ids[i].String(), V: 1, T: now},
		})
		if err != nil {
			return err
		}
		events[i] = outbox.Event{Envelope: env, Topic: benchTopic, Tag: pl.tag}
	}
	return pgx.BeginFunc(ctx, pl.writer, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO kb_counters (id, version) SELECT unnest($1::uuid[]), 1`, ids); err != nil {
			return fmt.Errorf("insert counters: %w", err)
		}
		return outbox.Write(ctx, tx, events...)
	})
}

// burst commits n events in transactions of kernelTx and waits until the
// last is acknowledged.
func (pl *pipeline) burst(b *testing.B, n int) {
	b.Helper()
	done := pl.track.expect(n)
	for left := n; left > 0; left -= kernelTx {
		if err := pl.commit(b.Context(), min(kernelTx, left)); err != nil {
			b.Fatal(err)
		}
	}
	pl.await(b, done)
}

// paced commits pacedTx events every pacedTick for d, catching up when a
// commit runs late, and waits until the last is acknowledged. It returns
// the rate it offered.
func (pl *pipeline) paced(b *testing.B, d time.Duration) float64 {
	b.Helper()
	ticks := int(d / pacedTick)
	done := pl.track.expect(ticks * pacedTx)
	start := time.Now()
	for k := range ticks {
		time.Sleep(time.Until(start.Add(time.Duration(k) * pacedTick)))
		if err := pl.commit(b.Context(), pacedTx); err != nil {
			b.Fatal(err)
		}
	}
	offered := float64(ticks*pacedTx) / time.Since(start).Seconds()
	pl.await(b, done)
	return offered
}

func (pl *pipeline) await(b *testing.B, done <-chan struct{}) {
	b.Helper()
	select {
	case <-done:
	case <-time.After(settleTimeout):
		b.Fatalf("only %d events acknowledged after %s; %s", pl.track.ackedCount(), settleTimeout, pl.diagnose())
	}
}

// diagnose says where events are stuck.
func (pl *pipeline) diagnose() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var pending, failed, applied int
	err := pl.writer.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), coalesce(sum(publish_attempts), 0),
		(SELECT count(*) FROM inbox_dedup) FROM outbox_events`).Scan(&pending, &failed, &applied)
	if err != nil {
		return fmt.Sprintf("diagnose: %v", err)
	}
	return fmt.Sprintf("outbox: %d unpublished, %d failed sends; inbox: %d applied", pending, failed, applied)
}

// warm runs warmUp events through and forgets their latencies.
func (pl *pipeline) warm(b *testing.B) {
	b.Helper()
	pl.burst(b, warmUp)
	pl.track.reset()
	pl.sends.reset()
	if pl.batcher != nil {
		pl.batcher.reset()
	}
}

// report adds the metrics and logs what the timed part measured: latency
// by segment, the relay's sends, and where the CPU went since cpu.
func (pl *pipeline) report(b *testing.B, cpu cpuSample, events int) {
	b.Helper()
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
	if pl.batcher != nil {
		b.ReportMetric(pl.batcher.meanSize(), "events/tx")
	}
	pl.track.report(b)
	b.Log(pl.sends.summary(pl.params.publishers))
	// CPU-s per 1,000 events is CPU-ms per event: the unit of the goal
	// bench.sh prints beside it.
	b.ReportMetric(logCPU(b, cpu, events), "go-cpu-ms/event")
	pl.verify(b)
}

// verify fails the benchmark unless every counter row was bumped exactly
// once: the effect of every event happened, and only once.
func (pl *pipeline) verify(b *testing.B) {
	b.Helper()
	var rows, once int
	err := pl.writer.QueryRow(b.Context(), `SELECT count(*), count(*) FILTER (WHERE version = 2) FROM kb_counters`).Scan(&rows, &once)
	if err != nil {
		b.Fatalf("verify: %v", err)
	}
	if once != rows {
		b.Errorf("%d of %d counter rows were not bumped exactly once", rows-once, rows)
	}
}

// BenchmarkKernel measures events/s through the whole kernel: commit
// (outbox.Write, transactions of 50) → relay → RocketMQ → source →
// inbox.Do with a versioned UPDATE → ACK. One b.Loop iteration is a burst
// of 2,000 events, from the first commit to the last ACK, so ns/op is per
// 2,000 events and events/s is the figure to read. A burst's latencies are
// mostly queueing behind it; BenchmarkKernelPaced1000 measures latency at a
// steady rate.
func BenchmarkKernel(b *testing.B) {
	pl := startPipeline(b, kernelParams(benchGroups(b, rocketmqtest.Config(b)).kernel))
	runBursts(b, pl)
}

// BenchmarkKernelPaced1000 offers 1,000 events/s (10 every 10 ms) for 3 s
// and reports commit→settled and commit→ACK latency at that rate. One
// b.Loop iteration is one 3 s run and the wait for its last ACK; events/s
// is then the rate offered, and offered-events/s says how well the
// producer kept to it.
func BenchmarkKernelPaced1000(b *testing.B) {
	pl := startPipeline(b, kernelParams(benchGroups(b, rocketmqtest.Config(b)).paced))
	runPaced(b, pl)
}

func runBursts(b *testing.B, pl *pipeline) {
	pl.warm(b)
	cpu := sampleCPU()
	b.ReportAllocs()
	for b.Loop() {
		pl.burst(b, kernelRound)
	}
	pl.report(b, cpu, b.N*kernelRound)
}

func runPaced(b *testing.B, pl *pipeline) {
	pl.warm(b)
	cpu := sampleCPU()
	b.ReportAllocs()
	var offered float64
	for b.Loop() {
		offered += pl.paced(b, pacedFor)
	}
	b.ReportMetric(offered/float64(b.N), "offered-events/s")
	pl.report(b, cpu, b.N*int(pacedFor/pacedTick)*pacedTx)
}
