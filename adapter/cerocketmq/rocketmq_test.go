//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package cerocketmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// brokerBundle is the real proxy with this run's own topics and groups.
type brokerBundle struct {
	cfg      config.RocketMQ
	normal   catalog.Topic
	delay    catalog.Topic
	fifo     catalog.Topic
	groups   map[string]catalog.Group // by test name
	producer *rocketmq.Producer
}

// TestRealBroker runs the binding through the RocketMQ proxy on every topic
// type. The topics and groups are created once for all its subtests.
func TestRealBroker(t *testing.T) {
	cfg := rocketmqtest.Config(t)
	b := &brokerBundle{
		cfg:    cfg,
		normal: catalog.Topic{Name: rocketmqtest.UniqueName("t_normal"), Type: catalog.Normal},
		delay:  catalog.Topic{Name: rocketmqtest.UniqueName("t_delay"), Type: catalog.Delay},
		fifo:   catalog.Topic{Name: rocketmqtest.UniqueName("t_fifo"), Type: catalog.FIFO},
		groups: map[string]catalog.Group{},
	}
	for _, name := range []string{"binary", "structured", "redeliver", "delay"} {
		b.groups[name] = catalog.Group{Name: rocketmqtest.UniqueName("g_" + name), MaxDeliveryAttempts: 4}
	}
	b.groups["fifo"] = catalog.Group{Name: rocketmqtest.UniqueName("g_fifo"), MaxDeliveryAttempts: 4, Orderly: true}
	groups := make([]catalog.Group, 0, len(b.groups))
	for _, g := range b.groups {
		groups = append(groups, g)
	}
	rocketmqtest.Apply(t, cfg, []catalog.Topic{b.normal, b.delay, b.fifo}, groups)

	producer, err := rocketmq.NewProducer(cfg, b.normal.Name, b.delay.Name, b.fifo.Name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	b.producer = producer

	t.Run("binary round trip", func(t *testing.T) { t.Parallel(); b.roundTrip(t, "binary", context.Background()) })
	t.Run("structured round trip", func(t *testing.T) {
		t.Parallel()
		b.roundTrip(t, "structured", binding.WithForceStructured(context.Background()))
	})
	t.Run("nack redelivers with next attempt", func(t *testing.T) { t.Parallel(); b.redeliver(t) })
	t.Run("delay topic holds the message until its time", func(t *testing.T) { t.Parallel(); b.delayed(t) })
	t.Run("fifo topic keeps order within a message group", func(t *testing.T) { t.Parallel(); b.fifoOrder(t) })
	t.Run("topic type is enforced by the proxy", func(t *testing.T) { t.Parallel(); b.typeCheck(t) })
}

// receiver reads one consumer group's messages as the source adapter does:
// received for invisible, ACKed on Finish(nil), handed back for retry on
// any other Finish.
type receiver struct {
	c         mq.Consumer
	invisible time.Duration
	retry     time.Duration
}

// receiver starts a consumer of group on topic, filtered on tag.
func (b *brokerBundle) receiver(t *testing.T, group string, topic catalog.Topic, tag string) *receiver {
	t.Helper()
	c, err := rocketmq.NewConsumer(b.cfg, rocketmq.ConsumerParams{
		Group:   b.groups[group].Name,
		Filters: map[string]string{topic.Name: tag},
		Await:   5 * time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &receiver{c: c, invisible: config.DefaultSourceInvisible, retry: 10 * time.Second}
}

func (b *brokerBundle) send(t *testing.T, ctx context.Context, topic catalog.Topic, ev event.Event) {
	t.Helper()
	id, err := cerocketmq.NewSender(b.producer, topic.Name).SendMessage(ctx, binding.ToMessage(&ev))
	require.NoError(t, err)
	require.NotEmpty(t, id)
}

func receiveOne(t *testing.T, r *receiver, within time.Duration) *cerocketmq.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		batch, err := r.c.Receive(ctx, 1, r.invisible)
		require.NoError(t, err, "no message within %s", within)
		if len(batch) == 0 {
			continue
		}
		msg := batch[0]
		return cerocketmq.NewMessage(msg, func(result error) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if protocol.IsACK(result) {
				return r.c.Ack(ctx, msg)
			}
			return r.c.ChangeInvisibleDuration(ctx, msg, r.retry)
		})
	}
}

func eventWithTag(t *testing.T, tag string) event.Event {
	ev := testEvent(t)
	ev.SetID(uuid.Must(uuid.NewV7()).String())
	ev.SetType(tag)
	return ev
}

func (b *brokerBundle) roundTrip(t *testing.T, group string, ctx context.Context) {
	tag := "roundtrip." + group
	r := b.receiver(t, group, b.normal, tag)
	ev := eventWithTag(t, tag)
	b.send(t, ctx, b.normal, ev)

	m := receiveOne(t, r, time.Minute)
	require.Equal(t, []string{ev.ID()}, m.Received.Keys)
	require.Equal(t, tag, m.Received.Tag)
	require.Equal(t, 1, m.Received.DeliveryAttempt)
	got, err := binding.ToEvent(context.Background(), m)
	require.NoError(t, err)
	requireSameEvent(t, ev, *got)
	require.NoError(t, m.Finish(nil))
}

func (b *brokerBundle) redeliver(t *testing.T) {
	tag := "redeliver"
	r := b.receiver(t, "redeliver", b.normal, tag)
	r.invisible, r.retry = 20*time.Second, time.Second
	ev := eventWithTag(t, tag)
	b.send(t, context.Background(), b.normal, ev)

	first := receiveOne(t, r, time.Minute)
	require.Equal(t, 1, first.Received.DeliveryAttempt)
	require.NoError(t, first.Finish(protocol.ResultNACK))

	// Back well before the 20 s invisible time would have run out.
	second := receiveOne(t, r, 15*time.Second)
	require.Equal(t, first.Received.MessageID, second.Received.MessageID)
	require.Equal(t, 2, second.Received.DeliveryAttempt)
	require.NoError(t, second.Finish(nil))
}

func (b *brokerBundle) delayed(t *testing.T) {
	tag := "delayed"
	r := b.receiver(t, "delay", b.delay, tag)
	ev := eventWithTag(t, tag)
	due := time.Now().Add(6 * time.Second)
	b.send(t, cerocketmq.WithDeliveryTime(context.Background(), due), b.delay, ev)

	m := receiveOne(t, r, time.Minute)
	arrived := time.Now()
	require.False(t, arrived.Before(due.Add(-time.Second)), "delivered %s before its time", due.Sub(arrived))
	require.Equal(t, ev.ID(), m.Received.Keys[0])
	require.Equal(t, due.UnixMilli(), m.Received.DeliveryTime.UnixMilli())
	require.NoError(t, m.Finish(nil))
}

func (b *brokerBundle) fifoOrder(t *testing.T) {
	tag := "fifo"
	r := b.receiver(t, "fifo", b.fifo, tag)
	const perGroup = 10
	sent := map[string][]string{}
	for i := range perGroup {
		for _, task := range []string{"task-a", "task-b"} {
			ev := eventWithTag(t, tag)
			ev.SetSubject(task)
			require.NoError(t, ev.SetData(event.ApplicationJSON, map[string]any{"seq": i}))
			b.send(t, cerocketmq.WithMessageGroup(context.Background(), task), b.fifo, ev)
			sent[task] = append(sent[task], ev.ID())
		}
	}
	got := map[string][]string{}
	for range 2 * perGroup {
		m := receiveOne(t, r, time.Minute)
		require.NotEmpty(t, m.Received.MessageGroup)
		got[m.Received.MessageGroup] = append(got[m.Received.MessageGroup], m.Received.Keys[0])
		// Orderly: the next message of a group comes only after this ACK.
		require.NoError(t, m.Finish(nil))
	}
	require.Equal(t, sent, got)
}

func (b *brokerBundle) typeCheck(t *testing.T) {
	ev := eventWithTag(t, "typecheck")
	// A FIFO topic refuses a message without a message group, a DELAY topic
	// one without a delivery time.
	for _, topic := range []catalog.Topic{b.fifo, b.delay} {
		_, err := cerocketmq.NewSender(b.producer, topic.Name).SendMessage(context.Background(), binding.ToMessage(&ev))
		require.Error(t, err, fmt.Sprintf("%s topic accepted a NORMAL message", topic.Type))
		t.Logf("%s: %v", topic.Type, err)
	}
}
