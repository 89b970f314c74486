//go:build !race

// Benchmarks that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package kernelbench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/delivery"
)

// payload is the body of every benchmark event. T is the producer's clock
// when it built the event, just before the INSERT of the transaction that
// commits it: latencies "from commit" are measured from there, so they
// include the producer's own INSERT and COMMIT (about a millisecond).
type payload struct {
	ID string `json:"id"` // the counter row the event bumps
	V  int    `json:"v"`  // the version the handler expects
	T  int64  `json:"t"`  // unix nanoseconds
}

// timeline is one event's way through the pipeline. Every time comes from
// this process's clock; born is the relay producer's, on the same host.
type timeline struct {
	committed time.Time // payload T
	born      time.Time // the broker message's born timestamp, set by the sending client
	received  time.Time // Receive returned it to the source
	settled   time.Time // the deliverer returned success: the inbox transaction committed
	acked     time.Time // Ack returned
}

// segment is a span between two points of a timeline. A segment with a
// metric reports its p50 and p99 as <metric>50-ms and <metric>99-ms.
type segment struct {
	name     string
	from, to func(*timeline) time.Time
	metric   string
}

var (
	committed = func(t *timeline) time.Time { return t.committed }
	born      = func(t *timeline) time.Time { return t.born }
	received  = func(t *timeline) time.Time { return t.received }
	settled   = func(t *timeline) time.Time { return t.settled }
	acked     = func(t *timeline) time.Time { return t.acked }
)

// kernelSegments are the kernel's two totals, then the breakdown of the
// ACK total.
var kernelSegments = []segment{
	{"commit→settled", committed, settled, "p"},
	{"commit→ack", committed, acked, "ack-p"},
	{"commit→born (relay: NOTIFY, claim, queue)", committed, born, ""},
	{"born→received (send, broker, receive)", born, received, ""},
	{"received→settled (source, inbox.Do)", received, settled, ""},
	{"settled→ack (Ack RPC)", settled, acked, ""},
}

// bareSegments are the bare pair's: committed is just before Send.
var bareSegments = []segment{
	{"send→ack", committed, acked, "ack-p"},
	{"born→received (send, broker, receive)", born, received, ""},
	{"received→ack (Ack RPC)", received, acked, ""},
}

// tracker follows events by event id (the message key) and tells a round of
// the benchmark when the events it expects have all been acknowledged.
type tracker struct {
	segments []segment

	mu     sync.Mutex
	events map[string]*timeline
	spans  [][]time.Duration // parallel to segments, over acknowledged events
	acks   int               // distinct events acknowledged so far
	want   int               // acks that end the current round
	done   chan struct{}

	dups, stale atomic.Int64 // deliveries the inbox found done, or whose update matched no row
	// receives and receivedMsgs count the Receive calls that returned and
	// the messages they brought: RPCs per event are most of the client's CPU.
	receives, receivedMsgs atomic.Int64
}

func newTracker(segments []segment) *tracker {
	return &tracker{segments: segments, events: map[string]*timeline{}, spans: make([][]time.Duration, len(segments))}
}

// expect starts a round that ends when n more events have been acknowledged.
func (t *tracker) expect(n int) <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want = t.acks + n
	t.done = make(chan struct{})
	if n == 0 {
		close(t.done)
	}
	return t.done
}

// ackedCount reports how many distinct events have been acknowledged.
func (t *tracker) ackedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acks
}

func (t *tracker) at(id string) *timeline {
	tl := t.events[id]
	if tl == nil {
		tl = &timeline{}
		t.events[id] = tl
	}
	return tl
}

func (t *tracker) onReceive(msgs []*mq.Received, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range msgs {
		tl := t.at(messageKey(m))
		if !tl.received.IsZero() {
			continue // a redelivery: keep the first
		}
		tl.received, tl.born = now, m.BornAt
		var p payload
		if json.Unmarshal(m.Body, &p) == nil && p.T != 0 {
			tl.committed = time.Unix(0, p.T)
		}
	}
}

func (t *tracker) onSettle(id string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tl := t.at(id); tl.settled.IsZero() {
		tl.settled = now
	}
}

func (t *tracker) onAck(id string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tl := t.at(id)
	if !tl.acked.IsZero() {
		return
	}
	tl.acked = now
	for i, s := range t.segments {
		from, to := s.from(tl), s.to(tl)
		if !from.IsZero() && !to.IsZero() {
			t.spans[i] = append(t.spans[i], to.Sub(from))
		}
	}
	delete(t.events, id) // done with it; a late duplicate starts a fresh timeline
	t.acks++
	if t.acks == t.want {
		close(t.done)
	}
}

// reset forgets the spans measured so far (after a warm-up).
func (t *tracker) reset() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.spans {
		t.spans[i] = t.spans[i][:0]
	}
	t.receives.Store(0)
	t.receivedMsgs.Store(0)
}

// percentile returns the q-quantile of spans (nearest rank) in
// milliseconds; NaN without spans.
func percentile(spans []time.Duration, q float64) float64 {
	if len(spans) == 0 {
		return math.NaN()
	}
	s := slices.Clone(spans)
	slices.Sort(s)
	rank := max(int(math.Ceil(q*float64(len(s))))-1, 0)
	return float64(s[rank]) / float64(time.Millisecond)
}

// report adds the latency metrics, logs the breakdown, and fails the
// benchmark if any delivery did not apply its event.
func (t *tracker) report(b *testing.B) {
	b.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	var sb strings.Builder
	fmt.Fprintf(&sb, "latency over %d events (ms)%*s %7s %7s %7s %7s\n", len(t.spans[0]), 12, "", "p50", "p90", "p99", "max")
	for i, s := range t.segments {
		spans := t.spans[i]
		if s.metric != "" {
			b.ReportMetric(percentile(spans, 0.50), s.metric+"50-ms")
			b.ReportMetric(percentile(spans, 0.99), s.metric+"99-ms")
		}
		fmt.Fprintf(&sb, "  %-41s %7.1f %7.1f %7.1f %7.1f\n", s.name,
			percentile(spans, 0.5), percentile(spans, 0.9), percentile(spans, 0.99), percentile(spans, 1))
	}
	b.Log(strings.TrimSuffix(sb.String(), "\n"))
	if n := t.receives.Load(); n > 0 {
		b.Logf("source: %d receives, %.1f messages each on average", n, float64(t.receivedMsgs.Load())/float64(n))
	}
	if d, s := t.dups.Load(), t.stale.Load(); d+s > 0 {
		b.Errorf("%d duplicate deliveries and %d stale no-ops: every event should apply once", d, s)
	}
}

// messageKey is the event id the relay sets as the message key.
func messageKey(m *mq.Received) string {
	if len(m.Keys) > 0 {
		return m.Keys[0]
	}
	return m.MessageID
}

// timedConsumer records when messages are received and acknowledged. The
// source sees it as any other consumer.
type timedConsumer struct {
	mq.Consumer
	track *tracker
}

func (c timedConsumer) Receive(ctx context.Context, max int, invisible time.Duration) ([]*mq.Received, error) {
	msgs, err := c.Consumer.Receive(ctx, max, invisible)
	c.track.receives.Add(1)
	c.track.receivedMsgs.Add(int64(len(msgs)))
	if len(msgs) > 0 {
		c.track.onReceive(msgs, time.Now())
	}
	return msgs, err
}

func (c timedConsumer) Ack(ctx context.Context, msg *mq.Received) error {
	err := c.Consumer.Ack(ctx, msg)
	if err == nil {
		c.track.onAck(messageKey(msg), time.Now())
	}
	return err
}

// timedDeliverer records when a delivery settled: the handler returned
// success, so its inbox transaction committed and the source ACKs next.
type timedDeliverer struct {
	delivery.Deliverer
	track *tracker
}

func (d timedDeliverer) Deliver(ctx context.Context, ev event.Event) error {
	err := d.Deliverer.Deliver(ctx, ev)
	if err == nil {
		d.track.onSettle(ev.ID(), time.Now())
	}
	return err
}
