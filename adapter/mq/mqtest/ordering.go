package mqtest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
)

// testDelay: a message on a DELAY topic comes at its delivery time, not
// before.
func testDelay(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.delayed, map[string]string{s.delay.Name: "dl"})
	at := time.Now().Add(tm.MinInvisible / 2)
	sent := &mq.Message{Topic: s.delay.Name, Tag: "dl", Keys: []string{s.key("dl")}, DeliveryTime: at, Body: []byte("later")}
	id := s.send(ctx, t, sent)
	poll(ctx, t, c, 16, tm.MinInvisible, tm.MinInvisible/2+tm.Lag+4*tm.Await, "delayed message",
		func(r *mq.Received, _ time.Time) bool {
			now := time.Now()
			require.Equal(t, id, r.MessageID)
			require.False(t, now.Before(at.Add(-tm.Early-clockSlack)), "delivered %s before its time", at.Sub(now))
			requireSameMessage(t, sent, r)
			t.Logf("delivered %s after its time", now.Sub(at).Round(time.Millisecond))
			require.NoError(t, c.Ack(ctx, r))
			return true
		})
}

// fifoGroups is how many message groups the FIFO case sends to: enough that
// some land in other queues than the first (RocketMQ hashes message groups
// onto queues).
const fifoGroups = 8

// testFIFO: an orderly group gets each message group's messages in send
// order; while one message is in flight the next of its message group does
// not come, yet other message groups keep flowing.
func testFIFO(t *testing.T, s *suite) {
	ctx, tm := s.ctx(t), s.h.Timing
	c := s.consumer(t, s.ordered, map[string]string{s.fifo.Name: "ff"})
	sentIDs := map[string]bool{}
	for round := 1; round <= 2; round++ {
		for g := range fifoGroups {
			body := fmt.Sprintf("task-%d/%d", g, round)
			sentIDs[s.send(ctx, t, &mq.Message{Topic: s.fifo.Name, Tag: "ff", Keys: []string{s.key("ff-" + body)},
				MessageGroup: fmt.Sprintf("task-%d", g), Body: []byte(body)})] = true
		}
	}
	order := map[string][]string{} // message group -> bodies in order of first delivery
	seen := map[string]bool{}
	record := func(r *mq.Received) {
		require.True(t, sentIDs[r.MessageID], "foreign message %s", r.MessageID)
		if !seen[r.MessageID] {
			seen[r.MessageID] = true
			order[r.MessageGroup] = append(order[r.MessageGroup], string(r.Body))
		}
	}

	// Hold one message in flight, long enough for the rest of the case.
	hold := 3 * tm.MinInvisible
	var held *mq.Received
	poll(ctx, t, c, 1, hold, tm.Lag+4*tm.Await, "first FIFO message", func(r *mq.Received, _ time.Time) bool {
		record(r)
		held = r
		return true
	})
	require.Equal(t, 1, held.DeliveryAttempt)
	heldAt := time.Now()

	// Others flow; nothing more of the held message group comes.
	others := 0
	for time.Since(heldAt) < 2*tm.MinInvisible {
		rs, err := c.Receive(ctx, 16, tm.MinInvisible)
		require.NoError(t, err)
		for _, r := range rs {
			require.NotEqual(t, held.MessageGroup, r.MessageGroup,
				"%s delivered while %s of its message group is unsettled", r.Body, held.Body)
			record(r)
			require.NoError(t, c.Ack(ctx, r))
			others++
		}
		if len(rs) == 0 && others > 0 {
			break
		}
	}
	require.Positive(t, others, "no other message group flowed while %s was in flight", held.Body)
	t.Logf("%d messages of other message groups came while %s was in flight", others, held.Body)

	require.NoError(t, c.Ack(ctx, held))
	poll(ctx, t, c, 16, tm.MinInvisible, tm.Lag+8*tm.Await, "the rest of the FIFO messages", func(r *mq.Received, _ time.Time) bool {
		record(r)
		require.NoError(t, c.Ack(ctx, r))
		return len(seen) == len(sentIDs)
	})
	for g := range fifoGroups {
		name := fmt.Sprintf("task-%d", g)
		require.Equal(t, []string{name + "/1", name + "/2"}, order[name], "order of message group %s", name)
	}
}
