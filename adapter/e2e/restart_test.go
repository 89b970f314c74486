//go:build !race

package e2e_test

import (
	"context"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/outbox"
)

// TestProxyRestart restarts the RocketMQ proxy (and its embedded broker)
// while events flow: the relay and the source adapter recover by themselves
// and every event still has exactly one effect.
//
// It stops the broker every other test uses, so it is not a TestRealBroker*
// test: `make test` runs it alone, after the others (local/services/test.sh).
func TestProxyRestart(t *testing.T) {
	ctx := context.Background()
	cfg := rocketmqtest.Config(t)
	pool := dbtest.TestSchema(t)
	createEffects(t, pool)
	run := rocketmqtest.UniqueName("run")
	tag := rocketmqtest.UniqueName("restart")
	topic := catalog.BillingSettle
	group := catalog.Group{Name: rocketmqtest.UniqueName("g_restart"), MaxDeliveryAttempts: 16,
		Subscriptions: []catalog.Subscription{{Topic: topic, Tags: []string{tag}}}}
	rocketmqtest.Apply(t, cfg, nil, []catalog.Group{group})

	producer, err := rocketmq.NewProducer(cfg, topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	consumer, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{
		Group: group.Name, Filters: map[string]string{topic.BrokerName(): tag}, Await: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = consumer.Close() })

	fn := effectStage(pool, group.Name, catalog.EventSettleRequested, run)
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = relay.New(relay.Params{Pool: pool, Producer: producer, Owner: "restart", Poll: 200 * time.Millisecond, Logger: testLogger(t, "relay"),
			BackoffBase: 500 * time.Millisecond, BackoffMax: 5 * time.Second}).Run(runCtx)
	}()
	go func() {
		defer wg.Done()
		_ = source.New(source.Params{Group: group, Consumers: []mq.Consumer{consumer}, Deliverer: source.HandlerFunc(fn.Handle),
			Quarantine: pool, Workers: 8, Logger: testLogger(t, "source"), Invisible: 20 * time.Second, HandlerTimeout: 10 * time.Second,
			RetryDelay: func(int) time.Duration { return 2 * time.Second }}).Run(runCtx)
	}()

	const n = 400
	var events []outbox.Event
	for i := range n {
		events = append(events, newEvent(t, topic, catalog.EventSettleRequested, tag, run, i))
	}
	writeDone := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += 20 {
			if err := writeEvents(ctx, pool, events[i:i+20], 20); err != nil {
				writeDone <- err
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
		writeDone <- nil
	}()

	time.Sleep(time.Second)
	out, err := exec.Command("../../local/services/services.sh", "restart-proxy").CombinedOutput()
	require.NoError(t, err, "restart the proxy: %s", out)
	require.NoError(t, <-writeDone)

	t.Cleanup(func() {
		var pending, attempts int
		_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), coalesce(sum(publish_attempts),0) FROM outbox_events`).Scan(&pending, &attempts)
		t.Logf("outbox: %d unpublished, %d failed publishes", pending, attempts)
	})
	waitForEffects(t, pool, n, 3*time.Minute)
	time.Sleep(5 * time.Second) // late redeliveries show up as duplicates, if any
	rows, distinct := effectCounts(t, pool)
	require.Equal(t, n, distinct, "no event lost across the restart")
	require.Equal(t, n, rows, "no event applied twice")
}
