//go:build !race

package e2e_test

// Graceful shutdown of the adapter's long-running commands (relay, source,
// dlq drain) on the real proxy; see shutdown_test.go.
//
// The source and the drainer take a catalog group (--group), not a test's
// own: both use cg.render.export.v1, the one group whose stage is not built
// (functions.Built), so no other test or `go run ./local` stack consumes
// it. The drainer reads its dead-letter topic with cg.dlq.drain.v1, which
// no other test uses either.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// adapterEnv is what every adapter command under test reads besides its
// own tuning.
func adapterEnv(cfg config.RocketMQ, dbURL string) []string {
	return []string{
		"DATABASE_URL=" + dbURL,
		"ROCKETMQ_ENDPOINT=" + cfg.Endpoint,
		"HTTP_ADDR=127.0.0.1:0",
		"LOG_FORMAT=text",
	}
}

// TestRealBrokerRelayShutdown stops the relay with SIGTERM while it
// publishes a backlog: every row it marked published reached the broker,
// the rest stay unpublished and a second relay publishes them, and every
// event arrives.
func TestRealBrokerRelayShutdown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := rocketmqtest.Config(t)
	pool, dbURL := schemaPool(t)
	topic, tag := catalog.BillingSettle, rocketmqtest.UniqueName("shutdown")
	group := catalog.Group{Name: rocketmqtest.UniqueName("g_shutdown_relay"), MaxDeliveryAttempts: 4,
		Subscriptions: []catalog.Subscription{{Topic: topic, Tags: []string{tag}}}}
	rocketmqtest.Apply(t, cfg, nil, []catalog.Group{group})
	got := receive(t, cfg, group, topic, tag)
	bin := buildBinary(t, "github.com/aivedio/pipeline/adapter")

	const n = 1200
	run := rocketmqtest.UniqueName("run")
	var events []outbox.Event
	for i := range n {
		events = append(events, newEvent(t, topic, catalog.EventSettleRequested, tag, run, i))
	}
	require.NoError(t, writeEvents(ctx, pool, events, 200))

	// Slow enough that SIGTERM finds sends in flight.
	env := append(adapterEnv(cfg, dbURL), "RELAY_PUBLISHERS=2", "RELAY_BATCH=16", "RELAY_LEASE=2s")
	first := startDaemon(t, "relay", bin, env, "relay")
	first.waitLine(30*time.Second, `msg="relay started"`)
	require.Eventually(t, func() bool { return len(publishedIDs(t, pool)) >= 100 }, 30*time.Second, 5*time.Millisecond)
	sent := first.terminate()
	first.requireCleanExit(sent, `msg="relay stopped"`)

	marked := publishedIDs(t, pool)
	var leased, failed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE lease_owner IS NOT NULL),
		count(*) FILTER (WHERE publish_attempts > 0) FROM outbox_events WHERE published_at IS NULL`).Scan(&leased, &failed))
	t.Logf("at exit: %d of %d marked published; of the rest %d still leased, %d recorded as failed publishes", len(marked), n, leased, failed)
	require.Less(t, len(marked), n, "the relay finished before SIGTERM: nothing was in flight")

	// Nothing was marked published without having been sent: the second
	// relay publishes only unmarked rows, so these must arrive already.
	got.waitFor(t, marked, 30*time.Second)

	// Two publishers of 16 rows each, beside the -race pass under make
	// test: the rest takes tens of seconds when the proxy is slow. The
	// bound is for a relay that publishes nothing, not a pace.
	second := startDaemon(t, "relay 2", bin, env, "relay")
	require.Eventually(t, func() bool { return len(publishedIDs(t, pool)) == n }, 2*time.Minute, 50*time.Millisecond,
		"the rows left unpublished are published by the next relay")
	all := map[string]bool{}
	for _, e := range events {
		all[e.Envelope.EventID] = true
	}
	got.waitFor(t, all, 30*time.Second)
	sent = second.terminate()
	second.requireCleanExit(sent, `msg="relay stopped"`)
	t.Logf("every event arrived; %d arrived twice (a send cut short by the stop may still have reached the broker)", got.repeats())
}

// publishedIDs returns the event ids of the rows marked published.
func publishedIDs(t *testing.T, pool *pgxpool.Pool) map[string]bool {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT event_id::text FROM outbox_events WHERE published_at IS NOT NULL`)
	require.NoError(t, err)
	defer rows.Close()
	ids := map[string]bool{}
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids[id] = true
	}
	require.NoError(t, rows.Err())
	return ids
}

// received counts the events a test consumer group got, by event id.
type received struct {
	mu    sync.Mutex
	count map[string]int
}

// receive consumes topic's messages tagged tag as group, ACKing each,
// until the test ends.
func receive(t *testing.T, cfg config.RocketMQ, group catalog.Group, topic catalog.Topic, tag string) *received {
	t.Helper()
	c, err := rocketmq.NewConsumer(cfg, rocketmq.ConsumerParams{Group: group.BrokerName(),
		Filters: map[string]string{topic.BrokerName(): tag}, Await: 4 * time.Second})
	require.NoError(t, err)
	r := &received{count: map[string]int{}}
	ctx, stop := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait(); _ = c.Close() })
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				msgs, err := c.Receive(ctx, 32, 20*time.Second)
				if err != nil {
					continue
				}
				for _, m := range msgs {
					ev, err := binding.ToEvent(ctx, cerocketmq.NewMessage(m, nil))
					if err == nil {
						r.mu.Lock()
						r.count[ev.ID()]++
						r.mu.Unlock()
					}
					_ = c.Ack(ctx, m)
				}
			}
		})
	}
	return r
}

// waitFor waits until every one of ids has arrived.
func (r *received) waitFor(t *testing.T, ids map[string]bool, within time.Duration) {
	t.Helper()
	missing := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 0
		for id := range ids {
			if r.count[id] == 0 {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(within)
	for m := missing(); m > 0; m = missing() {
		require.True(t, time.Now().Before(deadline), "%d of %d events never arrived", m, len(ids))
		time.Sleep(50 * time.Millisecond)
	}
}

// repeats counts the events that arrived more than once.
func (r *received) repeats() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, c := range r.count {
		if c > 1 {
			n++
		}
	}
	return n
}

// slowSink is a stage function that takes delay before it works, and
// records when each event arrived and was answered.
type slowSink struct {
	next  stage.HandleFunc
	delay time.Duration

	mu       sync.Mutex
	arrivals map[string]int
	answers  map[string][]answered
}

type answered struct {
	at time.Time
	ok bool
}

func (s *slowSink) Handle(ctx context.Context, ev event.Event) (*event.Event, error) {
	s.mu.Lock()
	s.arrivals[ev.ID()]++
	s.mu.Unlock()
	var (
		reply *event.Event
		err   error
	)
	select {
	case <-time.After(s.delay):
		reply, err = s.next(ctx, ev)
	case <-ctx.Done():
		err = ctx.Err()
	}
	s.mu.Lock()
	s.answers[ev.ID()] = append(s.answers[ev.ID()], answered{at: time.Now(), ok: err == nil})
	s.mu.Unlock()
	return reply, err
}

// arrived counts how many of ids arrived at least once.
func (s *slowSink) arrived(ids []string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if s.arrivals[id] > 0 {
			n++
		}
	}
	return n
}

// TestRealBrokerSourceShutdown stops the source adapter with SIGTERM while
// every worker is inside a delivery to a stage that takes 2 s, and while
// more messages arrive: the deliveries in flight finish and are answered
// before the process exits 0; whatever was not ACKed is redelivered to the
// next source; every event's effect happens exactly once.
func TestRealBrokerSourceShutdown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := rocketmqtest.Config(t)
	pool, dbURL := schemaPool(t)
	createEffects(t, pool)
	run := rocketmqtest.UniqueName("run")
	group, topic := catalog.GroupRender, catalog.RenderExport
	sink := &slowSink{next: effectStage(pool, group.Name, catalog.EventRenderRequested, run).Handle, delay: 2 * time.Second,
		arrivals: map[string]int{}, answers: map[string][]answered{}}
	sinkServer := httptest.NewServer(stage.HTTPHandler(sink.Handle))
	t.Cleanup(sinkServer.Close)

	producer, err := rocketmq.NewProducer(cfg, topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	r := relay.New(relay.Params{Pool: pool, Producer: producer, Owner: run, Logger: testLogger(t, "relay")})
	publish := func(from, to int) []string {
		var events []outbox.Event
		var ids []string
		for i := from; i < to; i++ {
			e := newEvent(t, topic, catalog.EventRenderRequested, "", run, i)
			events = append(events, e)
			ids = append(ids, e.Envelope.EventID)
		}
		require.NoError(t, writeEvents(ctx, pool, events, len(events)))
		for {
			claimed, err := r.RunOnce(ctx)
			require.NoError(t, err)
			if claimed == 0 {
				return ids
			}
		}
	}

	bin := buildBinary(t, "github.com/aivedio/pipeline/adapter")
	env := append(adapterEnv(cfg, dbURL), "SOURCE_WORKERS=16", "SOURCE_INVISIBLE=10s", "SOURCE_HANDLER_TIMEOUT=5s", "SOURCE_COLD_START=2s")
	args := []string{"source", "--group", group.Name, "--sink", sinkServer.URL}
	first := startDaemon(t, "source", bin, env, args...)
	first.waitLine(30*time.Second, `msg="source started"`)

	inFlight := publish(0, 6)
	// 30 s: a source stopped less than 20 s ago (an earlier run) may have
	// left a long poll parked that takes them, and they come back revived.
	require.Eventually(t, func() bool { return sink.arrived(inFlight) == len(inFlight) }, 30*time.Second, 5*time.Millisecond)
	sent := first.terminate()
	more := publish(6, 12) // arriving while the source stops
	exited := first.requireCleanExit(sent, `msg="source stopped"`)

	// The deliveries in flight were finished, not cut off.
	sink.mu.Lock()
	for _, id := range inFlight {
		a := sink.answers[id]
		require.NotEmpty(t, a, "event %s in flight at SIGTERM was never answered", id)
		require.True(t, a[0].ok && a[0].at.Before(exited), "event %s in flight at SIGTERM: answered ok %v, %s before exit", id, a[0].ok, exited.Sub(a[0].at))
	}
	sink.mu.Unlock()
	rows, distinct := effectCounts(t, pool)
	require.Equal(t, len(inFlight), rows, "the effects of the deliveries in flight, once each")
	require.Equal(t, len(inFlight), distinct)

	// The next source gets the rest, and anything the first received but
	// did not ACK once its invisible time (10 s) ran out and the broker
	// revived it (up to ~13 s more). The events published during the stop
	// usually take that path: the proxy keeps the long poll the stopping
	// source canceled (up to its 20 s await) parked at the broker, which
	// pops them for no one.
	second := startDaemon(t, "source 2", bin, env, args...)
	waitForEffects(t, pool, len(inFlight)+len(more), 45*time.Second)
	time.Sleep(time.Until(sent.Add(25 * time.Second)))
	rows, distinct = effectCounts(t, pool)
	require.Equal(t, len(inFlight)+len(more), distinct, "no event lost")
	require.Equal(t, len(inFlight)+len(more), rows, "no event applied twice")
	sink.mu.Lock()
	redelivered := 0
	for _, id := range append(inFlight, more...) {
		if sink.arrivals[id] > 1 {
			redelivered++
		}
	}
	sink.mu.Unlock()
	t.Logf("%d of %d events were delivered more than once (not ACKed before a stop, redelivered, absorbed by the inbox)", redelivered, len(inFlight)+len(more))

	sent = second.terminate()
	second.requireCleanExit(sent, `msg="source stopped"`)
}

// TestRealBrokerDLQDrainShutdown stops `dlq drain` with SIGTERM while it
// writes a dead letter's quarantine row (the write waits on a row the test
// holds): the drainer finishes that write and its ACK, records nothing
// more, and exits 0; the row is whole and there once.
func TestRealBrokerDLQDrainShutdown(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := rocketmqtest.Config(t)
	pool, dbURL := schemaPool(t)
	group := catalog.GroupRender
	producer := deadLetterProducer(t, cfg, group)

	e := newEvent(t, catalog.RenderExport, catalog.EventRenderRequested, "", rocketmqtest.UniqueName("run"), 0)
	ce, err := e.Envelope.ToCloudEvent()
	require.NoError(t, err)
	var msg mq.Message
	require.NoError(t, cerocketmq.WriteMessage(cerocketmq.WithTag(ctx, catalog.EventRenderRequested), binding.ToMessage(&ce), &msg))
	msg.Topic, msg.Tag = group.DLQTopic(), catalog.EventRenderRequested
	messageID, err := producer.Send(ctx, &msg)
	require.NoError(t, err)

	// An uncommitted row with the same key (consumer, event, payload) makes
	// the drainer's insert of this dead letter (ON CONFLICT) wait for the
	// test, and only this one: whatever else the topic holds is recorded
	// meanwhile.
	lock := lockRows(t, pool, `INSERT INTO message_quarantine (consumer_name, event_id, message_id, topic, error_class, error_code, category,
			delivery_attempt, body, source)
		VALUES ($1, $2, $3, 'placeholder', 'placeholder', 'placeholder', 'DEPENDENCY', 0, $4, 'DLQ')`, group.Name, e.Envelope.EventID, messageID, msg.Body)

	// The drainer's ops server (its /healthz) closes as its stop begins: the
	// one sign, from outside, that it acted on SIGTERM.
	opsAddr := freeAddr(t)
	drain := startDaemon(t, "dlq drain", buildBinary(t, "github.com/aivedio/pipeline/adapter"),
		append(adapterEnv(cfg, dbURL), "HTTP_ADDR="+opsAddr), "dlq", "drain", "--group", group.Name)
	drain.waitLine(30*time.Second, `msg="dlq drain started"`)
	// The drainer looks for a topic it did not find again every 10 s.
	lock.waitBlocked(t, pool, 40*time.Second)
	require.False(t, refused(opsAddr), "the drainer's ops server is not listening on %s", opsAddr)

	sent := drain.terminate()
	require.Eventually(t, func() bool { return refused(opsAddr) }, 5*time.Second, 20*time.Millisecond,
		"the drainer did not begin its stop on SIGTERM")
	// Its stop has begun with the write in flight. Nothing marks a process
	// that does not exit, so this lets time pass for one that does not wait
	// (or waits too little) to exit before the write is let through.
	time.Sleep(500 * time.Millisecond)
	require.True(t, drain.running(), "the drainer exited with a quarantine write in flight")
	lock.release(t)
	drain.requireCleanExit(sent, `msg="dlq drain stopped"`)

	var (
		n                                 int
		eventID, topic, tag, source, code string
		body                              []byte
	)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) OVER (), coalesce(event_id::text, ''), topic, coalesce(tag, ''), source, error_code, body
		FROM message_quarantine WHERE consumer_name = $1 AND message_id = $2`, group.Name, messageID).
		Scan(&n, &eventID, &topic, &tag, &source, &code, &body))
	require.Equal(t, 1, n)
	require.Equal(t, []string{e.Envelope.EventID, group.DLQTopic(), catalog.EventRenderRequested, string(quarantine.SourceDLQ), dlq.ErrorCode},
		[]string{eventID, topic, tag, source, code}, "the quarantine row of the dead letter in flight")
	require.Equal(t, msg.Body, body)
	require.NotEmpty(t, drain.line(`msg="dead letter quarantined"`, "message_id="+messageID), "recorded by the drainer")
	require.Empty(t, drain.line("ack after quarantine failed"), "ACKed after its row was committed")
	// After SIGTERM, the drainer takes no new dead letter: the one in
	// flight is the last row it wrote.
	var after int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM message_quarantine WHERE received_at >
		(SELECT received_at FROM message_quarantine WHERE message_id = $1)`, messageID).Scan(&after))
	require.Zero(t, after, "rows written after the one in flight")
}

// deadLetterProducer returns a producer for group's dead-letter topic. The
// broker creates that topic with the group's first dead letter; on a broker
// that has none yet, the test creates it as the broker would, and waits
// until the proxy routes it.
func deadLetterProducer(t *testing.T, cfg config.RocketMQ, group catalog.Group) *rocketmq.Producer {
	t.Helper()
	name := group.DLQTopic()
	p, err := rocketmq.NewProducer(cfg, name)
	if err != nil {
		t.Logf("no dead-letter topic %s yet (%v): creating it", name, err)
		rocketmqtest.Apply(t, cfg, []catalog.Topic{{Name: name, Logical: name, Type: catalog.Normal}}, nil)
		require.Eventually(t, func() bool {
			p, err = rocketmq.NewProducer(cfg, name)
			return err == nil
		}, time.Minute, 2*time.Second, fmt.Sprintf("the proxy does not route %s", name))
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}
