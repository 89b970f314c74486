package mqtest

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// clockSlack absorbs clock granularity when the suite checks that
// something did not happen too early.
const clockSlack = 50 * time.Millisecond

// caseTimeout bounds one case; the waits inside are much shorter.
const caseTimeout = 5 * time.Minute

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	return ctx
}

// consumer opens a consumer of g, failing t if the broker refuses.
func (s *suite) consumer(t *testing.T, g catalog.Group, filters map[string]string) mq.Consumer {
	t.Helper()
	c, err := s.h.ConsumerFunc(t, g.BrokerName(), filters)
	require.NoError(t, err, "open consumer for %s", g.Name)
	return c
}

// key returns a message key unique to the run; what starts with the case's
// own prefix, so that a case can tell its messages from the others'.
func (s *suite) key(what string) string { return s.prefix + "-" + what }

// send publishes msg, failing t on error, and returns the message id.
func (s *suite) send(ctx context.Context, t *testing.T, msg *mq.Message) string {
	t.Helper()
	id, err := s.h.Producer.Send(ctx, msg)
	require.NoError(t, err, "send to %s", msg.Topic)
	require.NotEmpty(t, id, "send to %s returned no message id", msg.Topic)
	return id
}

// hasKeyPrefix reports whether one of r's keys starts with prefix.
func hasKeyPrefix(r *mq.Received, prefix string) bool {
	return slices.ContainsFunc(r.Keys, func(k string) bool { return strings.HasPrefix(k, prefix) })
}

// poll receives up to n messages at a time with the given invisible
// duration and hands each to each, with the time just before the Receive
// that returned it, until each reports done; it fails t after within.
// Every message of a batch is handed over, even after done.
func poll(ctx context.Context, t *testing.T, c mq.Consumer, n int, invisible, within time.Duration, what string,
	each func(r *mq.Received, asked time.Time) (done bool),
) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		require.True(t, time.Now().Before(deadline), "%s: not done within %s", what, within)
		asked := time.Now()
		rs, err := c.Receive(ctx, n, invisible)
		require.NoError(t, err, "%s: receive", what)
		done := false
		for _, r := range rs {
			if each(r, asked) {
				done = true
			}
		}
		if done {
			return
		}
	}
}

// expectOnly receives until every key in want has come and then once more,
// acking each message, and fails t if a message whose keys start with
// prefix but are not wanted comes, or a wanted one comes twice.
func (s *suite) expectOnly(ctx context.Context, t *testing.T, c mq.Consumer, prefix string, want ...string) map[string]*mq.Received {
	t.Helper()
	tm := s.h.Timing
	got := map[string]*mq.Received{}
	check := func(r *mq.Received) {
		if !hasKeyPrefix(r, prefix) {
			return
		}
		k := wantedKey(r, want)
		require.NotEmpty(t, k, "message with keys %v (tag %q) is not for this consumer", r.Keys, r.Tag)
		require.NotContains(t, got, k, "message %s came twice", k)
		got[k] = r
		require.NoError(t, c.Ack(ctx, r))
	}
	poll(ctx, t, c, 16, tm.MinInvisible, tm.Lag+4*tm.Await, "receive "+strings.Join(want, ", "),
		func(r *mq.Received, _ time.Time) bool {
			check(r)
			return len(got) == len(want)
		})
	// One more long poll: nothing else of ours may come.
	rs, err := c.Receive(ctx, 16, tm.MinInvisible)
	require.NoError(t, err)
	for _, r := range rs {
		check(r)
	}
	return got
}

func wantedKey(r *mq.Received, want []string) string {
	for _, k := range r.Keys {
		if slices.Contains(want, k) {
			return k
		}
	}
	return ""
}

// requireSameMessage checks that got carries what was sent; a broker may add
// properties of its own (RocketMQ adds __SHARDINGKEY on FIFO topics).
func requireSameMessage(t *testing.T, sent *mq.Message, got *mq.Received) {
	t.Helper()
	require.Equal(t, sent.Topic, got.Topic)
	require.Equal(t, sent.Tag, got.Tag)
	require.ElementsMatch(t, sent.Keys, got.Keys)
	require.Equal(t, sent.MessageGroup, got.MessageGroup)
	for k, v := range sent.Properties {
		require.Contains(t, got.Properties, k)
		require.Equal(t, v, got.Properties[k], "property %s", k)
	}
	require.Equal(t, sent.Body, got.Body)
	if sent.DeliveryTime.IsZero() {
		require.True(t, got.DeliveryTime.IsZero(), "delivery time %s on a message sent without one", got.DeliveryTime)
	} else {
		require.WithinDuration(t, sent.DeliveryTime, got.DeliveryTime, time.Millisecond)
	}
}
