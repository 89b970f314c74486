//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package source_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
)

// TestRealBrokerStopDuringALongPollStrandsNothing: a source stopped while
// its receive long-polls an empty topic, with messages published right
// after the stop, leaves none of them hidden for the invisible duration.
// Cut short, the poll left the proxy holding what it took for the whole
// invisible time; run to its end, what it brings is given back at once, and
// the next consumer of the group has it within seconds.
func TestRealBrokerStopDuringALongPollStrandsNothing(t *testing.T) {
	t.Parallel()
	cfg := rocketmqtest.Config(t)
	topic := catalog.Topic{Name: rocketmqtest.UniqueName("t_stop"), Type: catalog.Normal}
	group := catalog.Group{Name: rocketmqtest.UniqueName("g_stop"), Stage: "test", MaxDeliveryAttempts: 16,
		Subscriptions: []catalog.Subscription{{Topic: topic}}}
	rocketmqtest.Apply(t, cfg, []catalog.Topic{topic}, []catalog.Group{group})
	producer, err := rocketmq.NewProducer(cfg, topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	pool := dbtest.TestSchema(t)

	const invisible = 40 * time.Second
	start := func(d source.Deliverer) (stop func() error) {
		c, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: group.BrokerName(),
			Filters: map[string]string{topic.BrokerName(): "*"}, Await: 10 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			done <- source.New(source.Params{Group: group, Consumers: []mq.Consumer{c}, Deliverer: d, Quarantine: pool,
				Workers: 4, Invisible: invisible, HandlerTimeout: 5 * time.Second, DrainTimeout: 20 * time.Second}).Run(ctx)
		}()
		return func() error { cancel(); return <-done }
	}

	stopped := newRecorder(nil)
	stopFirst := start(stopped)
	time.Sleep(3 * time.Second) // its first receive is now long-polling the empty topic
	stopReturned := make(chan error, 1)
	go func() { stopReturned <- stopFirst() }()
	time.Sleep(200 * time.Millisecond) // the stop is under way
	sent := time.Now()
	const n = 5
	for range n {
		ev := validEvent(t)
		_, err := cerocketmq.NewSender(producer, topic.BrokerName()).SendMessage(t.Context(), binding.ToMessage(&ev))
		require.NoError(t, err)
	}
	require.NoError(t, <-stopReturned)
	t.Logf("the stopped source returned %s after the send", time.Since(sent).Round(time.Millisecond))
	require.Zero(t, stopped.events(), "the stopped source handled nothing")

	next := newRecorder(nil)
	stopNext := start(next)
	defer func() { require.NoError(t, stopNext()) }()
	require.Eventually(t, func() bool { return next.events() == n }, invisible/2, 50*time.Millisecond,
		"the next consumer got %d of %d messages: the rest are hidden for the invisible duration", next.events(), n)
	t.Logf("all %d delivered %s after the send", n, time.Since(sent).Round(time.Millisecond))
}
