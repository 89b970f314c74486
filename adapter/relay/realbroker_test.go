//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/outbox"
)

// TestRealBrokerRelay publishes NORMAL, DELAY and FIFO outbox rows through
// the real proxy, then republishes rows whose published mark was lost, as
// after a relay killed between send and mark: same event ids, nothing lost.
func TestRealBrokerRelay(t *testing.T) {
	ctx := context.Background()
	cfg := rocketmqtest.Config(t)
	pool := dbtest.TestSchema(t)
	tag := rocketmqtest.UniqueName("relaytest")
	group := catalog.Group{Name: rocketmqtest.UniqueName("g_relay"), MaxDeliveryAttempts: 4}
	fifoGroup := catalog.Group{Name: rocketmqtest.UniqueName("g_relay_fifo"), MaxDeliveryAttempts: 4, Orderly: true}
	rocketmqtest.Apply(t, cfg, nil, []catalog.Group{group, fifoGroup})

	var names []string
	for _, topic := range catalog.Topics() {
		names = append(names, topic.BrokerName())
	}
	producer, err := rocketmq.NewProducer(cfg, names...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })

	// 20 NORMAL, 2 DELAY (due in 3 s), and two FIFO groups of 10.
	var written []outbox.Event
	for range 20 {
		written = append(written, event(t, catalog.GenerationSubmit, tag, "", time.Time{}))
	}
	due := time.Now().Add(3 * time.Second)
	for range 2 {
		written = append(written, event(t, catalog.GenerationPollDelay, tag, "", due))
	}
	fifo := map[string][]string{}
	for range 10 {
		for _, task := range []string{"task-a-" + tag, "task-b-" + tag} {
			e := event(t, catalog.GenerationStateFIFO, tag, task, time.Time{})
			written = append(written, e)
			fifo[task] = append(fifo[task], e.Envelope.EventID)
		}
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, written...) }))

	r := relay.New(relay.Params{Pool: pool, Producer: producer, Owner: "test-relay", Batch: 16})
	drain(t, r)
	requireAllPublished(t, pool)

	// One consumer per topic: a simple consumer polls its topics in turn and
	// waits out the long poll on an empty one.
	normal := consumer(t, cfg, group, map[string]string{catalog.GenerationSubmit.BrokerName(): tag})
	delayed := consumer(t, cfg, group, map[string]string{catalog.GenerationPollDelay.BrokerName(): tag})
	orderly := consumer(t, cfg, fifoGroup, map[string]string{catalog.GenerationStateFIFO.BrokerName(): tag})

	got := receiveIDs(t, normal, 20)
	for _, e := range written[:20] {
		require.Contains(t, got, e.Envelope.EventID)
	}
	gotDelayed := receiveIDs(t, delayed, 2)
	require.False(t, time.Now().Before(due), "delay messages arrived before their time")
	for _, e := range written[20:22] {
		require.Contains(t, gotDelayed, e.Envelope.EventID)
	}
	order := map[string][]string{}
	for range 20 {
		m := receive(t, orderly)
		order[m.MessageGroup] = append(order[m.MessageGroup], m.Keys[0])
		require.NoError(t, orderly.Ack(ctx, m))
	}
	require.Equal(t, fifo, order, "each FIFO group arrives in the order it was written")

	// The relay died after sending and before marking: the rows come back.
	_, err = pool.Exec(ctx, `UPDATE outbox_events SET published_at = NULL WHERE topic = $1`, catalog.GenerationSubmit.Name)
	require.NoError(t, err)
	drain(t, r)
	requireAllPublished(t, pool)
	again := receiveIDs(t, normal, 20)
	for _, e := range written[:20] {
		require.Contains(t, again, e.Envelope.EventID, "republished with the same event id")
	}
}

func drain(t *testing.T, r *relay.Relay) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		n, err := r.RunOnce(ctx)
		require.NoError(t, err)
		return n == 0
	}, time.Minute, 10*time.Millisecond)
}

func requireAllPublished(t *testing.T, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) {
	t.Helper()
	var pending, attempts int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT count(*) FILTER (WHERE published_at IS NULL), coalesce(sum(publish_attempts), 0) FROM outbox_events`).Scan(&pending, &attempts))
	require.Zero(t, pending)
	require.Zero(t, attempts, "no publish failed")
}

func consumer(t *testing.T, cfg config.RocketMQ, g catalog.Group, filters map[string]string) mq.Consumer {
	t.Helper()
	c, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: g.Name, Filters: filters, Await: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func receive(t *testing.T, c mq.Consumer) *mq.Received {
	t.Helper()
	return receiveN(t, c, 1)[0]
}

// receiveN waits up to a minute for up to max messages (at least one).
func receiveN(t *testing.T, c mq.Consumer, max int) []*mq.Received {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		batch, err := c.Receive(context.Background(), max, 20*time.Second)
		require.NoError(t, err)
		if len(batch) > 0 {
			return batch
		}
	}
	t.Fatal("no message within a minute")
	return nil
}

// receiveIDs receives n messages, ACKs them and returns their event ids,
// read through the CloudEvents binding.
func receiveIDs(t *testing.T, c mq.Consumer, n int) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for len(ids) < n {
		for _, m := range receiveN(t, c, n-len(ids)) {
			ev, err := binding.ToEvent(context.Background(), cerocketmq.NewMessage(m, nil))
			require.NoError(t, err)
			require.Equal(t, m.Keys, []string{ev.ID()})
			ids[ev.ID()] = true
			require.NoError(t, c.Ack(context.Background(), m))
		}
	}
	return ids
}
