package memmq_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/mq/mqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

// TestConformanceJournaled runs the suite on a broker that keeps its
// messages in a journal, as `go run ./local` does.
func TestConformanceJournaled(t *testing.T) {
	t.Parallel()
	const (
		minInvisible = 300 * time.Millisecond
		await        = 100 * time.Millisecond
	)
	mqtest.Run(t, func(t *testing.T, topics []catalog.Topic, groups []catalog.Group) mqtest.Harness {
		b, err := memmq.Open(filepath.Join(t.TempDir(), "journal"), &memmq.Opts{MinInvisible: minInvisible, QueuesPerTopic: 2})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Close()) })
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

// journaled is a journaled broker on a fake clock with the topics and
// groups of setup; open opens it (again) on the same journal, as a
// restarted process does, without closing the one before: kill -9 closes
// nothing either.
type journaled struct {
	clock *fakeClock
	path  string
}

func (j *journaled) open(t *testing.T) *testBundle {
	t.Helper()
	b, err := memmq.Open(j.path, &memmq.Opts{NowFunc: j.clock.Now, QueuesPerTopic: 1})
	require.NoError(t, err)
	b.CreateTopic("normal", catalog.Normal)
	b.CreateTopic("delay", catalog.Delay)
	b.CreateTopic("fifo", catalog.FIFO)
	b.CreateGroup(memmq.GroupConfig{Name: "g", MaxDeliveryAttempts: 3})
	b.CreateGroup(memmq.GroupConfig{Name: "orderly", MaxDeliveryAttempts: 3, Orderly: true})
	return &testBundle{clock: j.clock, b: b, p: b.Producer()}
}

// TestOpenAgainKeepsState: after the process died, a broker opened on its
// journal has every message it had accepted and each group's state of it:
// settled ones stay settled, one being handled comes back at once with its
// delivery counted, one handed back returns at its time and holds its FIFO
// queue until then, a delayed one waits for its time, dead letters stay
// moved, and a group that subscribes later still reads the topic's log.
func TestOpenAgainKeepsState(t *testing.T) {
	t.Parallel()
	j := &journaled{clock: &fakeClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, path: filepath.Join(t.TempDir(), "journal")}
	tb := j.open(t)
	ctx := t.Context()
	c := tb.consumer(t, "g", map[string]string{"normal": "*", "delay": "*"})
	fifo := tb.consumer(t, "orderly", map[string]string{"fifo": "*"})
	for _, body := range []string{"acked", "handling", "retrying", "dead"} {
		tb.send(t, &mq.Message{Topic: "normal", Tag: "t", Keys: []string{body}, Properties: map[string]string{"k": body}, Body: []byte(body)})
	}
	tb.send(t, &mq.Message{Topic: "delay", Tag: "t", DeliveryTime: j.clock.Now().Add(time.Hour), Body: []byte("later")})
	tb.send(t, &mq.Message{Topic: "fifo", Tag: "t", MessageGroup: "task-1", Body: []byte("first")})
	tb.send(t, &mq.Message{Topic: "fifo", Tag: "t", MessageGroup: "task-1", Body: []byte("second")})

	rs := receive(t, c, 3, 5*time.Minute)
	require.Equal(t, []string{"acked", "handling", "retrying"}, bodies(rs))
	require.NoError(t, c.Ack(ctx, rs[0]))
	require.NoError(t, c.ChangeInvisibleDuration(ctx, rs[2], time.Minute))
	first := receive(t, fifo, 1, 10*time.Second)
	require.Equal(t, []string{"first"}, bodies(first))
	require.NoError(t, fifo.ChangeInvisibleDuration(ctx, first[0], 2*time.Minute))
	// "dead" uses up its three attempts, and the next look moves it to the
	// dead-letter topic.
	for range 3 {
		require.Equal(t, []string{"dead"}, bodies(receive(t, c, 16, 10*time.Second)))
		j.clock.Add(10 * time.Second)
	}
	require.Empty(t, receive(t, c, 16, 10*time.Second))

	// The process dies 30 s in, "handling" still being handled; a new one
	// opens the journal.
	again := j.open(t)
	c2 := again.consumer(t, "g", map[string]string{"normal": "*", "delay": "*"})
	rs = receive(t, c2, 16, 10*time.Second)
	require.Equal(t, []string{"handling"}, bodies(rs), "acked stays settled, retrying waits, later is delayed")
	require.Equal(t, 2, rs[0].DeliveryAttempt, "the interrupted delivery counts")
	require.Equal(t, mq.Message{Topic: "normal", Tag: "t", Keys: []string{"handling"}, Properties: map[string]string{"k": "handling"}, Body: []byte("handling")},
		rs[0].Message)
	require.NoError(t, c2.Ack(ctx, rs[0]))
	fifo2 := again.consumer(t, "orderly", map[string]string{"fifo": "*"})
	require.Empty(t, receive(t, fifo2, 16, 10*time.Second), "first holds its queue until its time")
	j.clock.Add(time.Minute)
	rs = receive(t, c2, 16, 10*time.Second)
	require.Equal(t, []string{"retrying"}, bodies(rs))
	require.Equal(t, 2, rs[0].DeliveryAttempt)
	require.NoError(t, c2.Ack(ctx, rs[0]))
	require.Empty(t, receive(t, fifo2, 16, 10*time.Second))
	j.clock.Add(time.Minute)
	require.Equal(t, []string{"first", "second"}, bodies(receive(t, fifo2, 16, 10*time.Second)))
	j.clock.Add(time.Hour)
	require.Equal(t, []string{"later"}, bodies(receive(t, c2, 16, 10*time.Second)))

	again.b.CreateGroup(memmq.GroupConfig{Name: "drain"})
	dead := receive(t, again.consumer(t, "drain", map[string]string{"%DLQ%g": "*"}), 16, 10*time.Second)
	require.Equal(t, []string{"dead"}, bodies(dead))
	require.Equal(t, 4, dead[0].DeliveryAttempt)
	again.b.CreateGroup(memmq.GroupConfig{Name: "late"})
	require.Len(t, receive(t, again.consumer(t, "late", map[string]string{"normal": "*"}), 16, 10*time.Second), 4,
		"a new group reads the retained log")
	require.NoError(t, again.b.Close())
}

// TestOpenDropsATornLastLine: the line a process died while writing is not
// a record; what came before it is kept.
func TestOpenDropsATornLastLine(t *testing.T) {
	t.Parallel()
	j := &journaled{clock: &fakeClock{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}, path: filepath.Join(t.TempDir(), "journal")}
	tb := j.open(t)
	c := tb.consumer(t, "g", map[string]string{"normal": "*"})
	tb.send(t, &mq.Message{Topic: "normal", Tag: "t", Body: []byte("kept")})
	require.NoError(t, tb.b.Close())
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(`{"m":{"topic":"normal","id":"X","msg":{"Body":"dG9`)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	_ = c

	again := j.open(t)
	require.Equal(t, []string{"kept"}, bodies(receive(t, again.consumer(t, "g", map[string]string{"normal": "*"}), 16, 10*time.Second)))
	require.NoError(t, again.b.Close())
}
