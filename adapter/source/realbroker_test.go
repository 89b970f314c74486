//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package source_test

import (
	"context"
	"sync/atomic"
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
	"github.com/aivedio/pipeline/shared/delivery"
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
	start := func(d delivery.Deliverer) (c *watchedConsumer, stop context.CancelFunc, done <-chan error) {
		rc, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: group.BrokerName(),
			Filters: map[string]string{topic.BrokerName(): "*"}, Await: 10 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = rc.Close() })
		c = &watchedConsumer{Consumer: rc}
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() {
			ran <- source.New(source.Params{Group: group, Consumers: []mq.Consumer{c}, Deliverer: d, Quarantine: pool,
				Workers: 4, Invisible: invisible, HandlerTimeout: 5 * time.Second, DrainTimeout: 20 * time.Second}).Run(ctx)
		}()
		return c, cancel, ran
	}

	stopped := newRecorder(nil)
	first, stopFirst, firstDone := start(stopped)
	// The stop must find a receive long-polling the empty topic.
	require.Eventually(t, func() bool { return first.inFlight.Load() > 0 }, 30*time.Second, 5*time.Millisecond,
		"the source never started a receive")
	stopFirst()
	require.Positive(t, first.inFlight.Load(), "no receive was under way at the stop: the test proves nothing")
	sent := time.Now()
	const n = 5
	for range n {
		ev := validEvent(t)
		_, err := cerocketmq.NewSender(producer, topic.BrokerName()).SendMessage(t.Context(), binding.ToMessage(&ev))
		require.NoError(t, err)
	}
	require.NoError(t, <-firstDone)
	t.Logf("the stopped source returned %s after the send", time.Since(sent).Round(time.Millisecond))
	require.Zero(t, stopped.events(), "the stopped source handled nothing")

	next := newRecorder(nil)
	_, stopNext, nextDone := start(next)
	defer func() { stopNext(); require.NoError(t, <-nextDone) }()
	require.Eventually(t, func() bool { return next.events() == n }, invisible/2, 50*time.Millisecond,
		"the next consumer got %d of %d messages: the rest are hidden for the invisible duration", next.events(), n)
	t.Logf("all %d delivered %s after the send", n, time.Since(sent).Round(time.Millisecond))
}

// watchedConsumer counts the receives it has under way, so that a test
// knows when a long poll is in flight.
type watchedConsumer struct {
	mq.Consumer
	inFlight atomic.Int32
}

func (w *watchedConsumer) Receive(ctx context.Context, max int, invisible time.Duration) ([]*mq.Received, error) {
	w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	return w.Consumer.Receive(ctx, max, invisible)
}
