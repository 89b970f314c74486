package source_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
)

// TestFIFOGroupsStayInOrderWithManyWorkers: a FIFO receive can hand over
// several messages of one group at once; with many workers they must still
// be handled one after another, in order, even when one fails and is
// retried, while different groups run in parallel.
func TestFIFOGroupsStayInOrderWithManyWorkers(t *testing.T) {
	t.Parallel()
	fifo := catalog.Topic{Name: "t_source_fifo_order", Type: catalog.FIFO}
	group := catalog.Group{Name: "cg.source.fifo.order.v1", Stage: "test", MaxDeliveryAttempts: 5, Orderly: true,
		Subscriptions: []catalog.Subscription{{Topic: fifo}}}
	broker := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	broker.Apply([]catalog.Topic{fifo}, []catalog.Group{group})
	consumer, err := broker.Consumer(group.BrokerName(), map[string]string{fifo.BrokerName(): "*"}, 50*time.Millisecond)
	require.NoError(t, err)

	groups := []string{"task-a", "task-b", "task-c"}
	want := map[string][]string{}
	var failOnce string
	for i := range 8 {
		for _, g := range groups {
			ev := validEvent(t)
			ctx := cerocketmq.WithMessageGroup(context.Background(), g)
			_, err := cerocketmq.NewSender(broker.Producer(), fifo.BrokerName()).SendMessage(ctx, binding.ToMessage(&ev))
			require.NoError(t, err)
			want[g] = append(want[g], ev.ID())
			if g == "task-b" && i == 3 {
				failOnce = ev.ID()
			}
		}
	}
	byID := map[string]string{}
	for g, ids := range want {
		for _, id := range ids {
			byID[id] = g
		}
	}

	var mu sync.Mutex
	got := map[string][]string{} // successful deliveries per group, in order
	d := newRecorder(func(_ context.Context, ev event.Event, attempt int) error {
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond) // let parallel handling reorder, if it can
		if ev.ID() == failOnce && attempt == 1 {
			return errors.New("transient failure")
		}
		mu.Lock()
		defer mu.Unlock()
		got[byID[ev.ID()]] = append(got[byID[ev.ID()]], ev.ID())
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	// Made here, not in the goroutine: a skip (no PostgreSQL) must end the
	// test, which it does only from the test's own goroutine.
	quarantine := dbtest.TestSchema(t)
	done := make(chan error, 1)
	go func() {
		done <- source.New(source.Params{Group: group, Consumers: []mq.Consumer{consumer}, Deliverer: d, Quarantine: quarantine,
			Workers: 8, Invisible: 5 * time.Second, HandlerTimeout: time.Second,
			RetryDelay: func(int) time.Duration { return 10 * time.Millisecond }}).Run(ctx)
	}()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ids := range got {
			n += len(ids)
		}
		return n == 24
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	for _, g := range groups {
		require.True(t, slices.Equal(want[g], got[g]), "group %s delivered out of order:\nwant %v\ngot  %v", g, want[g], got[g])
	}
}
