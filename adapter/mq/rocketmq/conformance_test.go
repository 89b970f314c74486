//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc.

package rocketmq_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/mqtest"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

// realAwait is the consumers' long poll. The proxy polls for at least 5 s
// whatever the client asks, and refuses a receive whose deadline (await plus
// the client's 3 s request timeout) leaves less than that: an await under
// about 2.5 s fails with ILLEGAL_POLLING_TIME.
const realAwait = 4 * time.Second

// TestRealBrokerConformance runs the broker conformance suite against the
// RocketMQ proxy that `make test` starts.
func TestRealBrokerConformance(t *testing.T) {
	t.Parallel()
	cfg := rocketmqtest.Config(t)
	mqtest.Run(t, func(t *testing.T, topics []catalog.Topic, groups []catalog.Group) mqtest.Harness {
		start := time.Now()
		rocketmqtest.Apply(t, cfg, topics, groups)
		t.Logf("created %d topics and %d groups in %s", len(topics), len(groups), time.Since(start).Round(time.Millisecond))
		names := make([]string, 0, len(topics))
		for _, topic := range topics {
			names = append(names, topic.BrokerName())
		}
		producer, err := rocketmq.NewProducer(cfg, names...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = producer.Close() })
		return mqtest.Harness{
			Producer: producer,
			ConsumerFunc: func(t *testing.T, group string, filters map[string]string) (mq.Consumer, error) {
				c, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: group, Filters: filters, Await: realAwait})
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { _ = c.Close() })
				return c, nil
			},
			Timing: mqtest.Timing{
				MinInvisible: 10 * time.Second, // the proxy's minimum
				Await:        realAwait,
				// Redelivery after an invisible duration was seen up to ~7 s
				// late: the broker revives expired messages in passes.
				Lag: 15 * time.Second,
				// The timer wheel works at 1 s precision.
				Early: time.Second,
			},
		}
	})
}
