//go:build !race

package kernelbench_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// benchTopic carries every benchmark message. It is a catalog topic (the
// outbox takes no other), already on the broker from `topics apply`; each
// benchmark reads only its own unique tag with its own unique group.
var benchTopic = catalog.GenerationCallback

// groupSet names the consumer groups of this process's benchmarks.
type groupSet struct {
	kernel, paced, batched, batchedPaced, bare1, bare4, warm catalog.Group
}

// The groups are created once per process: each admin command is a JVM, so
// one Apply of all of them is cheapest. The proxy is warmed up then too.
var (
	groupsOnce sync.Once
	groupsOK   bool
	groups     groupSet
)

// benchGroups creates the groups and warms the proxy up (warmBroker) on
// its first call, and returns the groups.
func benchGroups(b *testing.B, cfg config.RocketMQ) groupSet {
	b.Helper()
	groupsOnce.Do(func() {
		g := func(prefix string) catalog.Group {
			return catalog.Group{Name: rocketmqtest.UniqueName(prefix), Stage: "kernelbench", MaxDeliveryAttempts: 16}
		}
		groups = groupSet{
			kernel: g("kb_kernel"), paced: g("kb_paced"),
			batched: g("kb_batched"), batchedPaced: g("kb_batched_paced"),
			bare1: g("kb_bare1"), bare4: g("kb_bare4"), warm: g("kb_warm"),
		}
		rocketmqtest.Apply(b, cfg, nil, []catalog.Group{
			groups.kernel, groups.paced, groups.batched, groups.batchedPaced, groups.bare1, groups.bare4, groups.warm,
		})
		warmBroker(b, cfg, groups.warm)
		groupsOK = true // not reached when Apply or the warm-up fails the benchmark
	})
	if !groupsOK {
		b.Fatal("the benchmark consumer groups could not be created (see the first benchmark's failure)")
	}
	return groups
}

// newPool opens a pool of size conns on base's schema, closed in cleanup.
// dbtest's pool has pgx's default size, max(4, CPUs): 4 here, too few to
// share between a relay (whose LISTEN holds one for good) and 16 workers.
func newPool(b *testing.B, base *pgxpool.Pool, conns int32) *pgxpool.Pool {
	b.Helper()
	cfg := base.Config()
	cfg.MaxConns, cfg.MinConns = conns, conns
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatalf("open pool: %v", err)
	}
	b.Cleanup(pool.Close)
	return pool
}

// newProducer starts a producer for benchTopic, stopped in cleanup.
func newProducer(b *testing.B, cfg config.RocketMQ) *rocketmq.Producer {
	b.Helper()
	p, err := rocketmq.NewProducer(cfg, benchTopic.BrokerName())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	return p
}

// newConsumers starts n simple consumers of group reading tag on
// benchTopic, in parallel, each wrapped to report to track; stopped in
// cleanup. A simple consumer has one Receive in flight at a time, so
// several consumers receive in parallel.
func newConsumers(b *testing.B, cfg config.RocketMQ, group catalog.Group, tag string, n int, track *tracker) []mq.Consumer {
	b.Helper()
	var (
		wg   sync.WaitGroup
		errs = make([]error, n)
		cs   = make([]*rocketmq.Consumer, n)
	)
	for i := range n {
		wg.Go(func() {
			cs[i], errs[i] = rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{
				Group:   group.BrokerName(),
				Filters: map[string]string{benchTopic.BrokerName(): tag},
				Await:   5 * time.Second,
			})
		})
	}
	wg.Wait()
	out := make([]mq.Consumer, 0, n)
	for i, c := range cs {
		if errs[i] != nil {
			b.Fatal(errs[i])
		}
		b.Cleanup(func() { _ = c.Close() })
		out = append(out, timedConsumer{Consumer: c, track: track})
	}
	return out
}
