package mqtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
)

// testRoundTrip: what is sent to each kind of topic comes back unchanged.
func testRoundTrip(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.roundTrip, map[string]string{s.normal.Name: "rt", s.delay.Name: "rt", s.fifo.Name: "rt"})
	now := time.Now()
	sent := map[string]*mq.Message{}
	for _, m := range []*mq.Message{
		{Topic: s.normal.Name, Tag: "rt", Keys: []string{s.key("rt-normal"), "second-key"},
			Properties: map[string]string{"CE_type": "test.normal", "CE_source": "/aivedio/mqtest"}, Body: []byte(`{"n":1}`)},
		{Topic: s.delay.Name, Tag: "rt", Keys: []string{s.key("rt-delay")}, DeliveryTime: now.Add(tm.MinInvisible / 10),
			Properties: map[string]string{"CE_type": "test.delay"}, Body: []byte{0, 1, 2, 0xfe, 0xff}},
		{Topic: s.fifo.Name, Tag: "rt", Keys: []string{s.key("rt-fifo")}, MessageGroup: "task-42",
			Properties: map[string]string{"CE_type": "test.fifo"}, Body: []byte("fifo")},
	} {
		sent[s.send(ctx, t, m)] = m
	}
	got := map[string]bool{}
	poll(ctx, t, c, 16, tm.MinInvisible, tm.MinInvisible/10+tm.Lag+4*tm.Await, "round trip",
		func(r *mq.Received, _ time.Time) bool {
			m, ok := sent[r.MessageID]
			require.True(t, ok, "unexpected message %s with keys %v", r.MessageID, r.Keys)
			requireSameMessage(t, m, r)
			require.Equal(t, 1, r.DeliveryAttempt)
			require.WithinDuration(t, now, r.BornAt, time.Minute)
			require.NoError(t, c.Ack(ctx, r))
			got[r.MessageID] = true
			return len(got) == len(sent)
		})
}

// testTagFilter: a group gets the tags its expression names and no others.
func testTagFilter(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	ab := s.consumer(t, s.tagsAB, map[string]string{s.normal.Name: "ta||tb"})
	cc := s.consumer(t, s.tagsC, map[string]string{s.normal.Name: "tc"})
	for _, tag := range []string{"ta", "tb", "tc"} {
		s.send(ctx, t, &mq.Message{Topic: s.normal.Name, Tag: tag, Keys: []string{s.key("tags-" + tag)}, Body: []byte(tag)})
	}
	got := s.expectOnly(ctx, t, ab, s.key("tags-"), s.key("tags-ta"), s.key("tags-tb"))
	require.Equal(t, "ta", got[s.key("tags-ta")].Tag)
	s.expectOnly(ctx, t, cc, s.key("tags-"), s.key("tags-tc"))
}

// testEveryGroup: two groups on one topic each get every message, one of
// them through "*".
func testEveryGroup(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	a := s.consumer(t, s.fanA, map[string]string{s.normal.Name: "fan"})
	b := s.consumer(t, s.fanB, map[string]string{s.normal.Name: "*"})
	ids := map[string]bool{}
	for _, k := range []string{"fan-1", "fan-2", "fan-3"} {
		ids[s.send(ctx, t, &mq.Message{Topic: s.normal.Name, Tag: "fan", Keys: []string{s.key(k)}, Body: []byte(k)})] = true
	}
	for name, c := range map[string]mq.Consumer{"fan_a": a, "fan_b": b} {
		got := map[string]bool{}
		poll(ctx, t, c, 16, tm.MinInvisible, tm.Lag+4*tm.Await, name+" gets every message",
			func(r *mq.Received, _ time.Time) bool {
				// fan_b reads "*": it sees the other cases' messages too.
				require.NoError(t, c.Ack(ctx, r))
				if ids[r.MessageID] {
					got[r.MessageID] = true
				}
				return len(got) == len(ids)
			})
	}
}

// testWrongKind: the broker refuses a message whose kind does not match its
// topic's type, an empty body, and an unknown topic.
func testWrongKind(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	at := time.Now().Add(s.h.Timing.MinInvisible)
	body := []byte("wrong")
	for _, c := range []struct {
		what string
		msg  mq.Message
	}{
		{"delivery time on a NORMAL topic", mq.Message{Topic: s.normal.Name, DeliveryTime: at, Body: body}},
		{"message group on a NORMAL topic", mq.Message{Topic: s.normal.Name, MessageGroup: "g", Body: body}},
		{"plain message on a DELAY topic", mq.Message{Topic: s.delay.Name, Body: body}},
		{"message group on a DELAY topic", mq.Message{Topic: s.delay.Name, MessageGroup: "g", Body: body}},
		{"plain message on a FIFO topic", mq.Message{Topic: s.fifo.Name, Body: body}},
		{"delivery time on a FIFO topic", mq.Message{Topic: s.fifo.Name, DeliveryTime: at, Body: body}},
		{"empty body", mq.Message{Topic: s.normal.Name}},
		{"unknown topic", mq.Message{Topic: s.prefix + "_missing", Body: body}},
	} {
		c.msg.Tag = "wrong"
		_, err := s.h.Producer.Send(ctx, &c.msg)
		require.Error(t, err, c.what)
		t.Logf("%s: %v", c.what, err)
	}
}

// testEmptyReceive: with nothing to deliver, Receive waits its await and
// returns an empty slice.
func testEmptyReceive(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.idle, map[string]string{s.normal.Name: "idle-none"})
	start := time.Now()
	rs, err := c.Receive(ctx, 16, tm.MinInvisible)
	took := time.Since(start)
	require.NoError(t, err)
	require.Empty(t, rs)
	require.GreaterOrEqual(t, took, tm.Await*9/10, "returned before its await")
	require.LessOrEqual(t, took, tm.Await+tm.Lag, "returned long after its await")
	t.Logf("empty receive took %s (await %s)", took.Round(time.Millisecond), tm.Await)
}

// testInvisibleBelowMinimum: Receive refuses an invisible duration the
// broker does not allow.
func testInvisibleBelowMinimum(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.idle, map[string]string{s.normal.Name: "idle-none"})
	_, err := c.Receive(ctx, 1, tm.MinInvisible/2)
	require.Error(t, err)
	t.Logf("invisible %s: %v", tm.MinInvisible/2, err)
}

// testUnknownTopicConsumer: a consumer of a topic that does not exist is
// refused, which is what a dead-letter drainer sees before the first dead
// letter of its group.
func testUnknownTopicConsumer(t *testing.T, s *suite) {
	_, err := s.h.ConsumerFunc(t, s.idle.BrokerName(), map[string]string{"%DLQ%" + s.prefix + "_missing": "*"})
	require.Error(t, err)
}
