package memmq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/mq/mqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

// TestConformance runs the suite the real broker passes, on short real
// durations: the emulator's minimum invisible time is lowered for it.
func TestConformance(t *testing.T) {
	t.Parallel()
	const (
		minInvisible = 300 * time.Millisecond
		await        = 100 * time.Millisecond
	)
	mqtest.Run(t, func(t *testing.T, topics []catalog.Topic, groups []catalog.Group) mqtest.Harness {
		b := memmq.New(&memmq.Opts{MinInvisible: minInvisible, QueuesPerTopic: 2})
		b.Apply(topics, groups)
		return mqtest.Harness{
			Producer: b.Producer(),
			ConsumerFunc: func(t *testing.T, group string, filters map[string]string) (mq.Consumer, error) {
				c, err := b.Consumer(group, filters, await)
				if err != nil {
					return nil, err
				}
				t.Cleanup(func() { _ = c.Close() })
				return c, nil
			},
			Timing: mqtest.Timing{MinInvisible: minInvisible, Await: await, Lag: 3 * time.Second},
		}
	})
}

// fakeClock is a broker clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testBundle is a broker on a fake clock with one topic of each type and
// two groups (g: max 3 attempts; orderly: FIFO, orderly).
type testBundle struct {
	clock *fakeClock
	b     *memmq.Broker
	p     *memmq.Producer
}

func setup(t *testing.T, opts *memmq.Opts) *testBundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	if opts == nil {
		opts = &memmq.Opts{}
	}
	opts.NowFunc = clock.Now
	b := memmq.New(opts)
	b.CreateTopic("normal", catalog.Normal)
	b.CreateTopic("delay", catalog.Delay)
	b.CreateTopic("fifo", catalog.FIFO)
	b.CreateGroup(memmq.GroupConfig{Name: "g", MaxDeliveryAttempts: 3})
	b.CreateGroup(memmq.GroupConfig{Name: "orderly", MaxDeliveryAttempts: 3, Orderly: true})
	return &testBundle{clock: clock, b: b, p: b.Producer()}
}

// consumer opens a consumer with a 1 ms await: on a fake clock a Receive
// only needs its one look.
func (tb *testBundle) consumer(t *testing.T, group string, filters map[string]string) *memmq.Consumer {
	t.Helper()
	c, err := tb.b.Consumer(group, filters, time.Millisecond)
	require.NoError(t, err)
	return c
}

func (tb *testBundle) send(t *testing.T, msg *mq.Message) string {
	t.Helper()
	id, err := tb.p.Send(context.Background(), msg)
	require.NoError(t, err)
	return id
}

func receive(t *testing.T, c mq.Consumer, n int, invisible time.Duration) []*mq.Received {
	t.Helper()
	rs, err := c.Receive(context.Background(), n, invisible)
	require.NoError(t, err)
	return rs
}

func bodies(rs []*mq.Received) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, string(r.Body))
	}
	return out
}

func TestDelayAndInvisibilityFollowTheClock(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	c := tb.consumer(t, "g", map[string]string{"delay": "*"})

	_, err := c.Receive(ctx, 1, 9*time.Second)
	require.ErrorContains(t, err, "below the minimum 10s")

	at := tb.clock.Now().Add(time.Hour)
	tb.send(t, &mq.Message{Topic: "delay", DeliveryTime: at, Body: []byte("d")})
	require.Empty(t, receive(t, c, 16, 10*time.Second))
	tb.clock.Add(time.Hour - time.Millisecond)
	require.Empty(t, receive(t, c, 16, 10*time.Second), "delivered before its time")
	tb.clock.Add(time.Millisecond)
	rs := receive(t, c, 16, 10*time.Second)
	require.Len(t, rs, 1)
	require.Equal(t, at, rs[0].DeliveryTime)
	require.Equal(t, 1, rs[0].DeliveryAttempt)

	tb.clock.Add(10*time.Second - time.Millisecond)
	require.Empty(t, receive(t, c, 16, 10*time.Second), "redelivered within its invisible duration")
	tb.clock.Add(time.Millisecond)
	again := receive(t, c, 16, 10*time.Second)
	require.Len(t, again, 1)
	require.Equal(t, rs[0].MessageID, again[0].MessageID)
	require.Equal(t, 2, again[0].DeliveryAttempt)

	_, err = tb.p.Send(ctx, &mq.Message{Topic: "delay", DeliveryTime: tb.clock.Now().Add(25 * time.Hour), Body: []byte("d")})
	require.ErrorContains(t, err, "more than 24h0m0s ahead")
}

func TestStaleHandles(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	tb.b.CreateGroup(memmq.GroupConfig{Name: "other"})
	c := tb.consumer(t, "g", map[string]string{"normal": "*"})
	other := tb.consumer(t, "other", map[string]string{"normal": "*"})
	tb.send(t, &mq.Message{Topic: "normal", Body: []byte("m")})

	first := receive(t, c, 1, 10*time.Second)[0]
	tb.clock.Add(10 * time.Second)
	require.ErrorIs(t, c.Ack(ctx, first), memmq.ErrInvalidHandle, "ack after the invisible duration")
	require.ErrorIs(t, c.ChangeInvisibleDuration(ctx, first, time.Second), memmq.ErrInvalidHandle)

	second := receive(t, c, 1, 10*time.Second)[0]
	require.Equal(t, 2, second.DeliveryAttempt)
	require.ErrorIs(t, c.Ack(ctx, first), memmq.ErrInvalidHandle, "ack of a replaced delivery")
	require.ErrorIs(t, other.Ack(ctx, second), memmq.ErrInvalidHandle, "ack through another group")
	require.ErrorIs(t, c.Ack(ctx, &mq.Received{MessageID: second.MessageID}), memmq.ErrInvalidHandle, "ack without a handle")

	// A change replaces the handle inside the same Received, which stays usable.
	require.NoError(t, c.ChangeInvisibleDuration(ctx, second, time.Hour))
	tb.clock.Add(30 * time.Minute)
	require.NoError(t, c.Ack(ctx, second))
	require.ErrorIs(t, c.Ack(ctx, second), memmq.ErrInvalidHandle, "second ack")
	tb.clock.Add(time.Hour)
	require.Empty(t, receive(t, c, 16, 10*time.Second))
}

func TestDeadLetterIsLazyAndCarriesAttempts(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	tb.b.CreateGroup(memmq.GroupConfig{Name: "drain", MaxDeliveryAttempts: 4})
	c := tb.consumer(t, "g", map[string]string{"normal": "*"})
	id := tb.send(t, &mq.Message{Topic: "normal", Tag: "t", Keys: []string{"k"}, Properties: map[string]string{"p": "v"}, Body: []byte("m")})
	for attempt := 1; attempt <= 3; attempt++ {
		rs := receive(t, c, 1, 10*time.Second)
		require.Len(t, rs, 1)
		require.Equal(t, attempt, rs[0].DeliveryAttempt)
		tb.clock.Add(10 * time.Second)
	}
	_, err := tb.b.Consumer("drain", map[string]string{"%DLQ%g": "*"}, time.Millisecond)
	require.ErrorIs(t, err, memmq.ErrUnknownTopic, "the dead-letter topic exists only after the group's next receive")

	require.Empty(t, receive(t, c, 16, 10*time.Second))
	drain := tb.consumer(t, "drain", map[string]string{"%DLQ%g": "*"})
	rs := receive(t, drain, 16, 10*time.Second)
	require.Len(t, rs, 1)
	require.Equal(t, id, rs[0].MessageID)
	require.Equal(t, mq.Message{Topic: "%DLQ%g", Tag: "t", Keys: []string{"k"}, Properties: map[string]string{"p": "v"}, Body: []byte("m")}, rs[0].Message)
	require.Equal(t, 4, rs[0].DeliveryAttempt)

	// That used up the drain group's maximum too: the next look moves the
	// copy on to the drain group's own dead-letter topic, as RocketMQ does.
	tb.clock.Add(10 * time.Second)
	require.Empty(t, receive(t, drain, 16, 10*time.Second))
	tb.b.CreateGroup(memmq.GroupConfig{Name: "drain2", MaxDeliveryAttempts: 100})
	rs = receive(t, tb.consumer(t, "drain2", map[string]string{"%DLQ%drain": "*"}), 16, 10*time.Second)
	require.Len(t, rs, 1)
	require.Equal(t, id, rs[0].MessageID)
	require.NoError(t, drain.Close())
}

func TestOrderlyGroupBlocksAQueue(t *testing.T) {
	t.Parallel()
	tb := setup(t, &memmq.Opts{QueuesPerTopic: 1})
	ctx := context.Background()
	tb.b.CreateGroup(memmq.GroupConfig{Name: "concurrent"})
	orderly := tb.consumer(t, "orderly", map[string]string{"fifo": "*"})
	concurrent := tb.consumer(t, "concurrent", map[string]string{"fifo": "*"})
	for _, m := range []struct{ group, body string }{{"a", "a1"}, {"a", "a2"}, {"b", "b1"}} {
		tb.send(t, &mq.Message{Topic: "fifo", MessageGroup: m.group, Body: []byte(m.body)})
	}

	a1 := receive(t, orderly, 1, 10*time.Second)
	require.Equal(t, []string{"a1"}, bodies(a1))
	require.Empty(t, receive(t, orderly, 16, 10*time.Second), "one queue: a1 in flight holds back a2 and b1")
	require.Equal(t, []string{"a1", "a2", "b1"}, bodies(receive(t, concurrent, 16, 10*time.Second)), "a concurrent group is not held back")

	require.NoError(t, orderly.Ack(ctx, a1[0]))
	rest := receive(t, orderly, 16, 10*time.Second)
	require.Equal(t, []string{"a2", "b1"}, bodies(rest), "one batch, in order")

	// An expired message comes back first, still holding back those behind it.
	require.NoError(t, orderly.Ack(ctx, rest[1]))
	tb.clock.Add(10 * time.Second)
	tb.send(t, &mq.Message{Topic: "fifo", MessageGroup: "b", Body: []byte("b2")})
	again := receive(t, orderly, 1, 10*time.Second)
	require.Equal(t, []string{"a2"}, bodies(again))
	require.Equal(t, 2, again[0].DeliveryAttempt)
	require.Empty(t, receive(t, orderly, 16, 10*time.Second))
}

func TestOrderlyGroupKeepsOtherQueuesFlowing(t *testing.T) {
	t.Parallel()
	tb := setup(t, &memmq.Opts{QueuesPerTopic: 8})
	orderly := tb.consumer(t, "orderly", map[string]string{"fifo": "*"})
	for g := range 16 {
		tb.send(t, &mq.Message{Topic: "fifo", MessageGroup: fmt.Sprintf("task-%d", g), Body: []byte(fmt.Sprintf("task-%d/1", g))})
		tb.send(t, &mq.Message{Topic: "fifo", MessageGroup: fmt.Sprintf("task-%d", g), Body: []byte(fmt.Sprintf("task-%d/2", g))})
	}
	held := receive(t, orderly, 1, 10*time.Second)
	require.Equal(t, []string{"task-0/1"}, bodies(held))
	rest := receive(t, orderly, 64, 10*time.Second)
	require.NotEmpty(t, rest)
	require.NotContains(t, bodies(rest), "task-0/2")
	require.Less(t, len(rest), 31, "message groups sharing task-0's queue are held back too")
}

func TestSetDown(t *testing.T) {
	t.Parallel()
	b := memmq.New(&memmq.Opts{MinInvisible: time.Second})
	b.CreateTopic("normal", catalog.Normal)
	b.CreateGroup(memmq.GroupConfig{Name: "g"})
	ctx := context.Background()
	c, err := b.Consumer("g", map[string]string{"normal": "*"}, time.Minute)
	require.NoError(t, err)
	_, err = b.Producer().Send(ctx, &mq.Message{Topic: "normal", Body: []byte("m")})
	require.NoError(t, err)
	rs := receive(t, c, 16, time.Minute)
	require.Len(t, rs, 1)

	b.SetDown(true)
	_, err = b.Producer().Send(ctx, &mq.Message{Topic: "normal", Body: []byte("m2")})
	require.ErrorIs(t, err, memmq.ErrDown)
	_, err = c.Receive(ctx, 1, time.Minute)
	require.ErrorIs(t, err, memmq.ErrDown)
	require.ErrorIs(t, c.Ack(ctx, rs[0]), memmq.ErrDown)
	require.ErrorIs(t, c.ChangeInvisibleDuration(ctx, rs[0], time.Second), memmq.ErrDown)

	// An outage ends a long poll in progress.
	b.SetDown(false)
	done := make(chan error, 1)
	go func() {
		_, err := c.Receive(ctx, 1, time.Minute)
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	b.SetDown(true)
	select {
	case err := <-done:
		require.ErrorIs(t, err, memmq.ErrDown)
	case <-time.After(5 * time.Second):
		t.Fatal("a long poll went on through the outage")
	}

	b.SetDown(false)
	require.NoError(t, c.Ack(ctx, rs[0]), "the delivery outlived the outage")
}

func TestReceiveHonoursContext(t *testing.T) {
	t.Parallel()
	b := memmq.New(nil)
	b.CreateTopic("normal", catalog.Normal)
	b.CreateGroup(memmq.GroupConfig{Name: "g"})
	c, err := b.Consumer("g", map[string]string{"normal": "*"}, time.Hour)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Receive(ctx, 1, 10*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 5*time.Second)

	require.NoError(t, c.Close())
	_, err = c.Receive(context.Background(), 1, 10*time.Second)
	require.ErrorContains(t, err, "consumer is closed")
}

func TestLongPollWakesOnSend(t *testing.T) {
	t.Parallel()
	b := memmq.New(nil)
	b.CreateTopic("normal", catalog.Normal)
	b.CreateGroup(memmq.GroupConfig{Name: "g"})
	c, err := b.Consumer("g", map[string]string{"normal": "*"}, time.Minute)
	require.NoError(t, err)
	got := make(chan []*mq.Received, 1)
	go func() {
		rs, _ := c.Receive(context.Background(), 16, 10*time.Second)
		got <- rs
	}()
	time.Sleep(20 * time.Millisecond)
	_, err = b.Producer().Send(context.Background(), &mq.Message{Topic: "normal", Body: []byte("m")})
	require.NoError(t, err)
	select {
	case rs := <-got:
		require.Len(t, rs, 1)
	case <-time.After(5 * time.Second):
		t.Fatal("long poll did not wake on send")
	}
}

func TestUniqueIDsUnderConcurrentSends(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	c := tb.consumer(t, "g", map[string]string{"normal": "*"})
	const senders, each = 8, 100
	ids := make(chan string, senders*each)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for range each {
				id, err := tb.p.Send(context.Background(), &mq.Message{Topic: "normal", Body: []byte("m")})
				if err == nil {
					ids <- id
				}
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		require.False(t, seen[id], "id %s twice", id)
		seen[id] = true
	}
	require.Len(t, seen, senders*each)
	require.Len(t, receive(t, c, 10*senders*each, 10*time.Second), senders*each)
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := context.Background()
	_, err := tb.p.Send(ctx, &mq.Message{Topic: "missing", Body: []byte("m")})
	require.ErrorIs(t, err, memmq.ErrUnknownTopic)
	_, err = tb.p.Send(ctx, &mq.Message{Topic: "fifo", Body: []byte("m")})
	require.ErrorIs(t, err, memmq.ErrMessageType)
	_, err = tb.p.Send(ctx, &mq.Message{Topic: "normal", Body: make([]byte, memmq.MaxBodySize+1)})
	require.ErrorContains(t, err, "exceeds")
	_, err = tb.b.Consumer("missing", map[string]string{"normal": "*"}, 0)
	require.ErrorIs(t, err, memmq.ErrUnknownGroup)
	_, err = tb.b.Consumer("g", map[string]string{"missing": "*"}, 0)
	require.ErrorIs(t, err, memmq.ErrUnknownTopic)
	_, err = tb.b.Consumer("g", nil, 0)
	require.Error(t, err)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = tb.p.Send(canceled, &mq.Message{Topic: "normal", Body: []byte("m")})
	require.True(t, errors.Is(err, context.Canceled))
}

func TestLateGroupReadsRetainedMessages(t *testing.T) {
	t.Parallel()
	tb := setup(t, &memmq.Opts{Retain: 2})
	for _, body := range []string{"m1", "m2", "m3"} {
		tb.send(t, &mq.Message{Topic: "normal", Body: []byte(body)})
	}
	c := tb.consumer(t, "g", map[string]string{"normal": "*"})
	require.Equal(t, []string{"m2", "m3"}, bodies(receive(t, c, 16, 10*time.Second)))
}

func TestTagFilterSettlesWhatItSkips(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	c := tb.consumer(t, "g", map[string]string{"normal": " A || B "})
	for _, tag := range []string{"A", "C", "B", ""} {
		tb.send(t, &mq.Message{Topic: "normal", Tag: tag, Body: []byte("tag " + tag)})
	}
	require.Equal(t, []string{"tag A", "tag B"}, bodies(receive(t, c, 16, 10*time.Second)))
	// Skipped messages are gone for the group, even with a wider filter.
	tb.clock.Add(time.Minute)
	wide := tb.consumer(t, "g", map[string]string{"normal": "*"})
	require.Equal(t, []string{"tag A", "tag B"}, bodies(receive(t, wide, 16, 10*time.Second)))
}
