//go:build !race

package kernelbench_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
)

// batchFlushers is how many inbox.DoBatch transactions run at once.
const batchFlushers = 4

// batcher gathers concurrent deliveries into inbox.DoBatch transactions:
// a free flusher takes one delivery and whatever else is already waiting,
// up to max, so a batch never waits for a timer, and it grows only while
// every flusher is busy (group commit). Each delivery still gets its own
// result: the source ACKs it only when its own event committed.
type batcher struct {
	pl   *pipeline
	pool *pgxpool.Pool
	max  int
	reqs chan batchReq
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	txs, events atomic.Int64 // DoBatch calls and the events they carried
}

type batchReq struct {
	env envelope.Envelope
	res chan error
}

func newBatcher(pl *pipeline, pool *pgxpool.Pool, max int) *batcher {
	bt := &batcher{pl: pl, pool: pool, max: min(max, inbox.MaxBatch), reqs: make(chan batchReq), quit: make(chan struct{})}
	for range batchFlushers {
		bt.wg.Go(bt.flush)
	}
	return bt
}

// errBatcherStopped fails deliveries that arrive after the batcher stopped;
// the source hands them back to the broker.
var errBatcherStopped = errors.New("batcher stopped")

func (bt *batcher) handle(ctx context.Context, ev event.Event) (*event.Event, error) {
	env, err := envelope.FromCloudEvent(ev)
	if err != nil {
		return nil, err
	}
	r := batchReq{env: env, res: make(chan error, 1)}
	select {
	case bt.reqs <- r:
	case <-bt.quit:
		return nil, errBatcherStopped
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	// Once taken, the batch may commit even if ctx ends: the message then
	// comes back and the inbox finds it done.
	select {
	case err := <-r.res:
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (bt *batcher) flush() {
	envs := make([]envelope.Envelope, 0, bt.max)
	batch := make([]batchReq, 0, bt.max)
	for {
		batch, envs = batch[:0], envs[:0]
		select {
		case r := <-bt.reqs:
			batch = append(batch, r)
		case <-bt.quit:
			return
		}
	gather:
		for len(batch) < bt.max {
			select {
			case r := <-bt.reqs:
				batch = append(batch, r)
			default:
				break gather
			}
		}
		for _, r := range batch {
			envs = append(envs, r.env)
		}
		bt.txs.Add(1)
		bt.events.Add(int64(len(envs)))
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		outs, errs, err := inbox.DoBatch(ctx, bt.pool, bt.pl.params.group.Name, envs,
			func(ctx context.Context, tx pgx.Tx, env envelope.Envelope) (inbox.Result, error) {
				return bump(ctx, tx, env)
			})
		cancel()
		for i, r := range batch {
			switch {
			case err != nil:
				r.res <- err
			case errs[i] != nil:
				r.res <- errs[i]
			default:
				bt.pl.count(outs[i])
				r.res <- nil
			}
		}
	}
}

// reset forgets the batch sizes so far (after a warm-up).
func (bt *batcher) reset() {
	bt.txs.Store(0)
	bt.events.Store(0)
}

// meanSize is the mean number of events per DoBatch transaction.
func (bt *batcher) meanSize() float64 {
	return float64(bt.events.Load()) / float64(max(bt.txs.Load(), 1))
}

func (bt *batcher) stop() {
	bt.once.Do(func() { close(bt.quit) })
	bt.wg.Wait()
}

// batchedParams are kernelParams with the handler batching up to 16 events
// per transaction.
func batchedParams(b *testing.B, paced bool) pipelineParams {
	gs := benchGroups(b, rocketmqtest.Config(b))
	g := gs.batched
	if paced {
		g = gs.batchedPaced
	}
	p := kernelParams(g)
	p.batched = 16
	p.sourceConns = batchFlushers
	return p
}

// BenchmarkKernelBatched is BenchmarkKernel with the stage's
// transactions batched by inbox.DoBatch: concurrent deliveries share one
// durable commit. events/tx is the mean batch.
func BenchmarkKernelBatched(b *testing.B) {
	runBursts(b, startPipeline(b, batchedParams(b, false)))
}

// BenchmarkKernelBatchedPaced1000 is BenchmarkKernelPaced1000 with batching.
func BenchmarkKernelBatchedPaced1000(b *testing.B) {
	runPaced(b, startPipeline(b, batchedParams(b, true)))
}
