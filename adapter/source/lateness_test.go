package source_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
)

// wakeups gathers the process-wide lateness histogram of one group: how
// many delayed messages it observed, and their summed lateness.
func wakeups(t *testing.T, group string) (uint64, float64) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(source.WakeupLateness())
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer_group" && l.GetValue() == group {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}

func TestWakeupLatenessOfFirstDeliveries(t *testing.T) {
	t.Parallel()
	// A group of its own, and counts taken before and after: the histogram
	// is process-wide and outlives a test run with -count.
	delayTopic := catalog.Topic{Name: "t_source_delay", Type: catalog.Delay}
	group := catalog.Group{Name: "cg.source.lateness.v1", Stage: "test", MaxDeliveryAttempts: 3,
		Subscriptions: []catalog.Subscription{{Topic: delayTopic}}}
	broker := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	broker.Apply([]catalog.Topic{delayTopic}, []catalog.Group{group})
	// A long poll far longer than the delay: a message the emulator did
	// not wake the poll for would wait out the poll, late by seconds.
	const await = 10 * time.Second
	c, err := broker.Consumer(group.BrokerName(), map[string]string{delayTopic.BrokerName(): "*"}, await)
	require.NoError(t, err)

	n0, sum0 := wakeups(t, group.Name)
	sender := cerocketmq.NewSender(broker.Producer(), delayTopic.BrokerName())
	due := time.Now().Add(200 * time.Millisecond)
	var first string
	for i := range 3 {
		ev := validEvent(t)
		if i == 0 {
			first = ev.ID()
		}
		_, err := sender.SendMessage(cerocketmq.WithDeliveryTime(context.Background(), due), binding.ToMessage(&ev))
		require.NoError(t, err)
	}
	// The first event fails once: its redelivery waits out a backoff, which
	// is no wake-up lateness.
	rec := newRecorder(func(_ context.Context, ev event.Event, attempt int) error {
		if ev.ID() == first && attempt == 1 {
			return errors.New("try again")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- source.New(source.Params{
			Group: group, Consumers: []mq.Consumer{c}, Deliverer: rec, Quarantine: failingExec{},
			Workers: 4, Invisible: 5 * time.Second, HandlerTimeout: 2 * time.Second,
			RetryDelay: func(int) time.Duration { return 300 * time.Millisecond },
			// The stop ends the receive waiting out its long poll; every
			// delivery is done by then.
			DrainTimeout: 100 * time.Millisecond,
		}).Run(ctx)
	}()
	require.Eventually(t, func() bool { return rec.events() == 3 && rec.count(first) == 2 }, 3*await, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	n, sum := wakeups(t, group.Name)
	n, sum = n-n0, sum-sum0
	require.Equal(t, uint64(3), n, "one observation per first delivery")
	require.GreaterOrEqual(t, sum, 0.0, "not delivered before its time")
	// Only the order of magnitude tells: milliseconds when woken at the
	// delivery time, most of the long poll otherwise. Generous, for a
	// machine loaded by -race.
	require.Less(t, sum/3, (await / 5).Seconds(), "the emulator wakes a long poll at the delivery time")
}
