package mqtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
)

// testRedelivery: of two messages received together, the acked one is gone
// for good and the other comes back after the invisible duration with the
// same id and one more attempt. The expired delivery's handle settles
// nothing.
func testRedelivery(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.expiry, map[string]string{s.normal.Name: "exp"})
	acked, unacked := s.key("exp-acked"), s.key("exp-unacked")
	for _, k := range []string{acked, unacked} {
		s.send(ctx, t, &mq.Message{Topic: s.normal.Name, Tag: "exp", Keys: []string{k}, Body: []byte(k)})
	}
	first := map[string]*mq.Received{}
	var askedAt time.Time // before the Receive that returned the unacked message
	poll(ctx, t, c, 16, tm.MinInvisible, tm.Lag+4*tm.Await, "first delivery", func(r *mq.Received, asked time.Time) bool {
		k := wantedKey(r, []string{acked, unacked})
		require.NotContains(t, first, k, "%s delivered twice within its invisible duration", k)
		first[k] = r
		if k == unacked {
			askedAt = asked
		}
		return len(first) == 2
	})
	require.NoError(t, c.Ack(ctx, first[acked]))

	// The unacked one comes back, not before its invisible duration.
	again := func(attempt int, notBefore time.Time, within time.Duration) *mq.Received {
		var got *mq.Received
		poll(ctx, t, c, 16, tm.MinInvisible, within, "redelivery", func(r *mq.Received, _ time.Time) bool {
			require.NotEqual(t, first[acked].MessageID, r.MessageID, "acked message delivered again")
			require.Equal(t, first[unacked].MessageID, r.MessageID)
			require.Equal(t, attempt, r.DeliveryAttempt)
			require.Equal(t, []byte(unacked), r.Body)
			require.False(t, time.Now().Before(notBefore.Add(-clockSlack)), "redelivered %s early", time.Until(notBefore))
			t.Logf("attempt %d came %s after it was due", attempt, time.Since(notBefore).Round(time.Millisecond))
			got = r
			return true
		})
		return got
	}
	second := again(2, askedAt.Add(tm.MinInvisible), tm.MinInvisible+tm.Lag+4*tm.Await)

	// The first delivery's handle has expired: changing it fails, and an Ack
	// with it (which RocketMQ answers with success) settles nothing.
	require.Error(t, c.ChangeInvisibleDuration(ctx, first[unacked], tm.MinInvisible/10))
	_ = c.Ack(ctx, first[unacked])
	short := tm.MinInvisible / 10
	changedAt := time.Now()
	require.NoError(t, c.ChangeInvisibleDuration(ctx, second, short))
	third := again(3, changedAt.Add(short), short+tm.Lag+4*tm.Await)
	require.NoError(t, c.Ack(ctx, third))

	rs, err := c.Receive(ctx, 16, tm.MinInvisible)
	require.NoError(t, err)
	require.Empty(t, rs, "a settled message came back")
}

// testChangeInvisibleDuration: after ChangeInvisibleDuration the message
// comes back once the new duration is over, long before the old one would
// have ended, with the same id and one more attempt.
func testChangeInvisibleDuration(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.change, map[string]string{s.normal.Name: "chg"})
	k := s.key("chg")
	id := s.send(ctx, t, &mq.Message{Topic: s.normal.Name, Tag: "chg", Keys: []string{k}, Body: []byte(k)})
	long, short := 3*tm.MinInvisible, tm.MinInvisible/10
	var (
		first   *mq.Received
		askedAt time.Time // the first invisible duration ends after askedAt+long
	)
	poll(ctx, t, c, 16, long, tm.Lag+4*tm.Await, "first delivery", func(r *mq.Received, asked time.Time) bool {
		require.Equal(t, id, r.MessageID)
		first, askedAt = r, asked
		return true
	})
	changedAt := time.Now()
	require.NoError(t, c.ChangeInvisibleDuration(ctx, first, short))
	poll(ctx, t, c, 16, tm.MinInvisible, short+tm.Lag+4*tm.Await, "redelivery after the change", func(r *mq.Received, _ time.Time) bool {
		require.Equal(t, id, r.MessageID)
		require.Equal(t, 2, r.DeliveryAttempt)
		require.Equal(t, []byte(k), r.Body)
		require.False(t, time.Now().Before(changedAt.Add(short-clockSlack)), "redelivered before the new duration")
		require.Less(t, time.Since(askedAt), long, "redelivered only when the first duration ended")
		t.Logf("redelivered %s after the change to %s", time.Since(changedAt).Round(time.Millisecond), short)
		require.NoError(t, c.Ack(ctx, r))
		return true
	})
}

// testDeadLetter: after the group's max delivery attempts the message moves
// to the group's dead-letter topic, which exists only from then on, and a
// drain group reads it there.
func testDeadLetter(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.dead, map[string]string{s.normal.Name: "dead"})
	sent := &mq.Message{Topic: s.normal.Name, Tag: "dead", Keys: []string{s.key("dead")},
		Properties: map[string]string{"CE_type": "test.dead"}, Body: []byte("dead letter")}
	id := s.send(ctx, t, sent)
	short := tm.MinInvisible / 10
	for attempt := 1; attempt <= deadMaxAttempts; attempt++ {
		poll(ctx, t, c, 16, tm.MinInvisible, short+tm.Lag+4*tm.Await, "delivery before the dead-letter move",
			func(r *mq.Received, _ time.Time) bool {
				require.Equal(t, id, r.MessageID)
				require.Equal(t, attempt, r.DeliveryAttempt)
				require.NoError(t, c.ChangeInvisibleDuration(ctx, r, short))
				return true
			})
	}

	// The group's next Receive finds the message past its attempts and moves
	// it; the drain consumer can open only once the topic exists.
	dlq := s.dead.DLQTopic()
	deadline := time.Now().Add(short + 2*tm.Lag + 8*tm.Await)
	var drain mq.Consumer
	for {
		require.True(t, time.Now().Before(deadline), "message never reached %s", dlq)
		rs, err := c.Receive(ctx, 16, tm.MinInvisible)
		require.NoError(t, err)
		for _, r := range rs {
			require.NotEqual(t, id, r.MessageID, "delivered %d times to a group of max %d", r.DeliveryAttempt, deadMaxAttempts)
		}
		if drain == nil {
			if drain, err = s.h.ConsumerFunc(t, s.drain.BrokerName(), map[string]string{dlq: "*"}); err != nil {
				t.Logf("no dead-letter topic yet: %v", err)
				drain = nil
				continue
			}
		}
		if rs, err = drain.Receive(ctx, 16, tm.MinInvisible); err != nil {
			require.NoError(t, err)
		}
		for _, r := range rs {
			require.Equal(t, id, r.MessageID, "foreign message on %s", dlq)
			want := *sent
			want.Topic = dlq
			requireSameMessage(t, &want, r)
			require.Greater(t, r.DeliveryAttempt, deadMaxAttempts, "attempts go on counting on the dead-letter topic")
			t.Logf("dead letter on %s with delivery attempt %d", dlq, r.DeliveryAttempt)
			require.NoError(t, drain.Ack(ctx, r))
			return
		}
	}
}
