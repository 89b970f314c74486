//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package anomaly_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

func init() {
	leakOptions = append(leakOptions, rocketmqtest.ClientLeaks()...)
}

// newRealBroker gives a test a kernel on the real proxy: a throwaway
// consumer group reading billing.settle under a tag of its own, giving up
// after maxAttempts deliveries, and a database schema of its own. With
// drains, it also creates a drain group for the group's dead letters (each
// group costs a run of RocketMQ's admin tool, a JVM start).
func newRealBroker(t *testing.T, name string, maxAttempts int, drains bool) *kernel {
	t.Helper()
	cfg := rocketmqtest.Config(t)
	topic, tag := catalog.BillingSettle, rocketmqtest.UniqueName("anomaly")
	group := catalog.Group{Name: rocketmqtest.UniqueName("g_anomaly_" + name), Stage: "anomaly", MaxDeliveryAttempts: maxAttempts,
		Subscriptions: []catalog.Subscription{{Topic: topic, Tags: []string{tag}}}}
	groups := []catalog.Group{group}
	var drainer dlq.ConsumerFunc
	if drains {
		// As high as catalog.DLQDrain's: the attempt count goes on from the group's.
		drain := catalog.Group{Name: rocketmqtest.UniqueName("g_anomaly_drain"), MaxDeliveryAttempts: catalog.DLQDrain.MaxDeliveryAttempts}
		groups = append(groups, drain)
		drainer = dlq.OpenConsumer(cfg, group, &dlq.OpenOpts{DrainGroup: drain, Await: 4 * time.Second})
	}
	rocketmqtest.Apply(t, cfg, nil, groups)
	producer, err := rocketmq.NewProducer(cfg, topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	return &kernel{
		pool:     pool(t),
		run:      rocketmqtest.UniqueName("run"),
		topic:    topic,
		tag:      tag,
		group:    group,
		producer: producer,
		consumer: func(t *testing.T) (mq.Consumer, func()) {
			t.Helper()
			c, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: group.BrokerName(),
				Filters: map[string]string{topic.BrokerName(): tag}, Await: 5 * time.Second})
			require.NoError(t, err)
			return c, closer(t, c)
		},
		dlq: drainer,
		// The proxy's minimum; it revives an expired or handed-back
		// message in steps of a few seconds.
		invisible: 10 * time.Second,
		lag:       6 * time.Second,
	}
}

// TestRealBrokerHandlerSlowerThanInvisibleTime: the row "handler slower
// than the invisible time", on the real proxy, whose redelivery and whose
// answer to an ACK of an expired receipt handle the emulator only mimics.
func TestRealBrokerHandlerSlowerThanInvisibleTime(t *testing.T) {
	t.Parallel()
	handlerSlowerThanInvisibleTime(t, newRealBroker(t, "slow", 16, false), 20)
}

// TestRealBrokerPoisonRetryStorm: the row "poison retry storm", on the
// real proxy, which counts the attempts and moves dead letters itself.
func TestRealBrokerPoisonRetryStorm(t *testing.T) {
	t.Parallel()
	poisonRetryStorm(t, newRealBroker(t, "storm", 3, true), 10, 200, time.Second)
}

// TestRealBrokerConsumerRebalance: the row "consumer rebalance", on the
// real proxy, which shares a group's messages among its consumers.
func TestRealBrokerConsumerRebalance(t *testing.T) {
	t.Parallel()
	consumerRebalance(t, newRealBroker(t, "rebalance", 16, false), 300, 100*time.Millisecond)
}
