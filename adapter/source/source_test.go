package source_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/quarantine"
)

var (
	testTopic = catalog.Topic{Name: "t_source", Type: catalog.Normal}
	testGroup = catalog.Group{Name: "cg.source.test.v1", Stage: "test", MaxDeliveryAttempts: 3,
		Subscriptions: []catalog.Subscription{{Topic: testTopic}}}
)

type testBundle struct {
	broker   *memmq.Broker
	pool     *pgxpool.Pool
	consumer *memmq.Consumer
	producer mq.Producer
}

// setup gives a test its own emulated broker (1 ms minimum invisible time,
// so retries are quick) and its own database schema.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	b.Apply([]catalog.Topic{testTopic}, []catalog.Group{testGroup})
	c, err := b.Consumer(testGroup.BrokerName(), map[string]string{testTopic.BrokerName(): "*"}, 50*time.Millisecond)
	require.NoError(t, err)
	return &testBundle{broker: b, pool: dbtest.TestSchema(t), consumer: c, producer: b.Producer()}
}

// run starts a Source delivering to d and returns its stop function, which
// waits for Run to return.
func (b *testBundle) run(t *testing.T, d delivery.Deliverer, edit ...func(*source.Params)) (stop func()) {
	t.Helper()
	p := source.Params{
		Group: testGroup, Consumers: []mq.Consumer{b.consumer}, Deliverer: d, Quarantine: b.pool,
		Workers: 4, Invisible: 5 * time.Second, HandlerTimeout: 2 * time.Second,
		RetryDelay: func(int) time.Duration { return 10 * time.Millisecond }, DrainTimeout: 2 * time.Second,
	}
	for _, f := range edit {
		f(&p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- source.New(p).Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			require.NoError(t, <-done)
		})
	}
	t.Cleanup(stop)
	return stop
}

func (b *testBundle) send(t *testing.T, ev event.Event) {
	t.Helper()
	_, err := cerocketmq.NewSender(b.producer, testTopic.BrokerName()).SendMessage(context.Background(), binding.ToMessage(&ev))
	require.NoError(t, err)
}

func validEvent(t *testing.T) event.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType: "test.happened", Producer: "test", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: map[string]any{"n": 1},
	})
	require.NoError(t, err)
	ev, err := env.ToCloudEvent()
	require.NoError(t, err)
	return ev
}

// recorder is a Deliverer that counts deliveries per event and answers
// with result(ev, attempt).
type recorder struct {
	mu       sync.Mutex
	attempts map[string]int
	result   func(ctx context.Context, ev event.Event, attempt int) error
}

func newRecorder(result func(context.Context, event.Event, int) error) *recorder {
	return &recorder{attempts: map[string]int{}, result: result}
}

func (r *recorder) Deliver(ctx context.Context, ev event.Event) error {
	r.mu.Lock()
	r.attempts[ev.ID()]++
	n := r.attempts[ev.ID()]
	r.mu.Unlock()
	if r.result == nil {
		return nil
	}
	return r.result(ctx, ev, n)
}

// events is how many distinct events were delivered.
func (r *recorder) events() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.attempts)
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}

func (b *testBundle) quarantined(t *testing.T) []string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT error_code FROM message_quarantine ORDER BY received_at`)
	require.NoError(t, err)
	var codes []string
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		codes = append(codes, c)
	}
	require.NoError(t, rows.Err())
	return codes
}

// requireSettled fails unless nothing is left for the group to receive.
func (b *testBundle) requireSettled(t *testing.T) {
	t.Helper()
	left, err := b.consumer.Receive(context.Background(), 16, time.Second)
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestSuccessIsAckedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(nil)
	var ids []string
	for range 20 {
		ev := validEvent(t)
		ids = append(ids, ev.ID())
		b.send(t, ev)
	}
	stop := b.run(t, rec)
	require.Eventually(t, func() bool { return rec.events() == 20 }, 10*time.Second, 5*time.Millisecond)
	stop()
	for _, id := range ids {
		require.Equal(t, 1, rec.count(id))
	}
	b.requireSettled(t)
	require.Empty(t, b.quarantined(t))
}

func TestPoisonIsQuarantinedOnceAndAcked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noTenant := validEvent(t)
	noTenant.SetExtension("tenantid", nil)
	refused := validEvent(t)
	rec := newRecorder(func(_ context.Context, ev event.Event, _ int) error {
		if ev.ID() == refused.ID() {
			return outcome.Permanentf("tenant.mismatch", "task belongs to another tenant")
		}
		return nil
	})

	_, err := b.producer.Send(context.Background(), &mq.Message{Topic: testTopic.BrokerName(), Body: []byte("{not json")})
	require.NoError(t, err)
	b.send(t, noTenant)
	b.send(t, refused)

	stop := b.run(t, rec)
	require.Eventually(t, func() bool { return len(b.quarantined(t)) == 3 }, 10*time.Second, 10*time.Millisecond)
	stop()
	require.ElementsMatch(t, []string{"not_cloudevent", "envelope.tenant_missing", "tenant.mismatch"}, b.quarantined(t))
	require.Zero(t, rec.count(noTenant.ID()), "an invalid envelope never reaches the function")
	require.Equal(t, 1, rec.count(refused.ID()), "a permanent failure is never retried")
	b.requireSettled(t)
}

func TestRetryableFailureIsRedelivered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(func(_ context.Context, _ event.Event, attempt int) error {
		if attempt < 3 {
			return errors.New("database unavailable")
		}
		return nil
	})
	ev := validEvent(t)
	b.send(t, ev)
	stop := b.run(t, rec)
	require.Eventually(t, func() bool { return rec.count(ev.ID()) == 3 }, 10*time.Second, 5*time.Millisecond)
	stop()
	b.requireSettled(t)
	require.Empty(t, b.quarantined(t))
}

func TestFailingEveryTimeEndsInDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := newRecorder(func(context.Context, event.Event, int) error { return errors.New("always fails") })
	ev := validEvent(t)
	b.send(t, ev)
	stop := b.run(t, rec)
	require.Eventually(t, func() bool { return rec.count(ev.ID()) == testGroup.MaxDeliveryAttempts }, 10*time.Second, 5*time.Millisecond)
	stop()
	b.requireSettled(t)
	require.Equal(t, testGroup.MaxDeliveryAttempts, rec.count(ev.ID()), "the broker stops after max delivery attempts")
}

// failingExec is a database that cannot be reached.
type failingExec struct{ quarantine.Execer } // only Exec and QueryRow are used

func (failingExec) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errors.New("connection refused")
}

func (failingExec) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{} }

type errRow struct{}

func (errRow) Scan(...any) error { return errors.New("connection refused") }

// countingFailingExec is a failingExec that counts the calls it refused,
// so a test knows a quarantine write was attempted and failed.
type countingFailingExec struct {
	failingExec
	refused atomic.Int32
}

func (c *countingFailingExec) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.refused.Add(1)
	return c.failingExec.Exec(ctx, sql, args...)
}

func (c *countingFailingExec) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.refused.Add(1)
	return c.failingExec.QueryRow(ctx, sql, args...)
}

func TestPoisonIsNotAckedWhenQuarantineFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := b.producer.Send(context.Background(), &mq.Message{Topic: testTopic.BrokerName(), Body: []byte("{not json")})
	require.NoError(t, err)
	db := &countingFailingExec{}
	stop := b.run(t, newRecorder(nil), func(p *source.Params) {
		p.Quarantine = db
		p.RetryDelay = func(int) time.Duration { return 500 * time.Millisecond }
	})
	// One attempt, refused by the database. The stop drains, so the
	// message is settled (handed back, not ACKed) before stop returns.
	require.Eventually(t, func() bool { return db.refused.Load() > 0 }, 5*time.Second, 5*time.Millisecond,
		"the source never tried to quarantine the poison")
	stop()
	// It comes back: nothing was lost while the database was away.
	require.Eventually(t, func() bool {
		got, err := b.consumer.Receive(context.Background(), 1, time.Second)
		require.NoError(t, err)
		return len(got) == 1 && string(got[0].Body) == "{not json"
	}, 5*time.Second, 10*time.Millisecond)
}

func TestWorkersBoundConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var now, peak atomic.Int32
	release := make(chan struct{})
	d := newRecorder(func(context.Context, event.Event, int) error {
		n := now.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-release
		now.Add(-1)
		return nil
	})
	for range 10 {
		b.send(t, validEvent(t))
	}
	stop := b.run(t, d, func(p *source.Params) { p.Workers = 3 })
	require.Eventually(t, func() bool { return now.Load() == 3 }, 5*time.Second, 5*time.Millisecond)
	// Nothing more may start meanwhile. No event marks a delivery that
	// does not start, so this lets time pass instead: with seven messages
	// waiting, the consumer's poll answers at once, and a receive past the
	// bound would start a fourth delivery well within it.
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, int32(3), peak.Load())
	close(release)
	require.Eventually(t, func() bool { return d.events() == 10 }, 5*time.Second, 5*time.Millisecond)
	stop()
	require.Equal(t, int32(3), peak.Load())
}

func TestStopWaitsForInFlightThenAbandons(t *testing.T) {
	t.Parallel()
	b := setup(t)
	started := make(chan string, 2)
	finish := make(chan struct{})
	d := newRecorder(func(ctx context.Context, ev event.Event, attempt int) error {
		if attempt > 1 {
			return nil
		}
		started <- ev.ID()
		select {
		case <-finish:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	first, second := validEvent(t), validEvent(t)
	b.send(t, first)
	stop := b.run(t, d, func(p *source.Params) { p.DrainTimeout = 300 * time.Millisecond; p.Workers = 1 })
	require.Equal(t, first.ID(), <-started)

	// Stop while the first is in flight and never finishes: it is abandoned
	// without an ACK and comes back to the next consumer.
	stop()
	b.send(t, second)
	close(finish)
	got := map[string]bool{}
	require.Eventually(t, func() bool {
		msgs, err := b.consumer.Receive(context.Background(), 4, time.Second)
		require.NoError(t, err)
		for _, m := range msgs {
			got[m.Keys[0]] = true
			require.NoError(t, b.consumer.Ack(context.Background(), m))
		}
		return got[first.ID()] && got[second.ID()]
	}, 10*time.Second, 10*time.Millisecond)
}

func TestHTTPDeliverMapsStatus(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]outcome.Class{
		http.StatusBadRequest:          outcome.ClassPermanent,
		http.StatusUnprocessableEntity: outcome.ClassPermanent,
		http.StatusInternalServerError: outcome.ClassRetryable,
	} {
		server := statusServer(t, func(int) int { return status })
		err := delivery.NewHTTP(server.URL, 1, time.Second).Deliver(context.Background(), validEvent(t))
		require.Error(t, err)
		class, _ := outcome.Of(err)
		require.Equal(t, want, class, "status %d", status)
	}
	ok := statusServer(t, func(int) int { return http.StatusOK })
	require.NoError(t, delivery.NewHTTP(ok.URL, 1, time.Second).Deliver(context.Background(), validEvent(t)))
}

// TestPoisonDoesNotBlockAFIFOGroup: on a FIFO topic, a poisoned message is
// quarantined and ACKed, so the messages after it in its own message group,
// and every other group, still flow.
func TestPoisonDoesNotBlockAFIFOGroup(t *testing.T) {
	t.Parallel()
	fifo := catalog.Topic{Name: "t_source_fifo", Type: catalog.FIFO}
	group := catalog.Group{Name: "cg.source.fifo.v1", Stage: "test", MaxDeliveryAttempts: 3, Orderly: true,
		Subscriptions: []catalog.Subscription{{Topic: fifo}}}
	broker := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	broker.Apply([]catalog.Topic{fifo}, []catalog.Group{group})
	consumer, err := broker.Consumer(group.BrokerName(), map[string]string{fifo.BrokerName(): "*"}, 50*time.Millisecond)
	require.NoError(t, err)
	pool := dbtest.TestSchema(t)

	send := func(messageGroup string, ev event.Event) {
		ctx := cerocketmq.WithMessageGroup(context.Background(), messageGroup)
		_, err := cerocketmq.NewSender(broker.Producer(), fifo.BrokerName()).SendMessage(ctx, binding.ToMessage(&ev))
		require.NoError(t, err)
	}
	poison := validEvent(t)
	poison.SetExtension("tenantid", nil)
	send("task-a", poison)
	var wantA, wantB []string
	for range 3 {
		a, b := validEvent(t), validEvent(t)
		send("task-a", a)
		send("task-b", b)
		wantA, wantB = append(wantA, a.ID()), append(wantB, b.ID())
	}

	var mu sync.Mutex
	var delivered []string // in delivery order
	d := newRecorder(func(_ context.Context, ev event.Event, _ int) error {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, ev.ID())
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- source.New(source.Params{Group: group, Consumers: []mq.Consumer{consumer}, Deliverer: d, Quarantine: pool,
			Workers: 1, Invisible: 5 * time.Second, HandlerTimeout: time.Second,
			RetryDelay: func(int) time.Duration { return 10 * time.Millisecond }}).Run(ctx)
	}()
	require.Eventually(t, func() bool { return d.events() == 6 }, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	var codes []string
	rows, err := pool.Query(context.Background(), `SELECT error_code FROM message_quarantine`)
	require.NoError(t, err)
	for rows.Next() {
		var c string
		require.NoError(t, rows.Scan(&c))
		codes = append(codes, c)
	}
	require.Equal(t, []string{"envelope.tenant_missing"}, codes)
	var gotA, gotB []string
	for _, id := range delivered {
		if slices.Contains(wantA, id) {
			gotA = append(gotA, id)
		} else {
			gotB = append(gotB, id)
		}
	}
	require.Equal(t, wantA, gotA, "task A goes on after its poisoned head, in order")
	require.Equal(t, wantB, gotB)
}

// TestBufferedMessagesAndBytes: messages the adapter received and has not
// settled are its client-side buffer, counted in messages and body bytes
// until they are acknowledged.
func TestBufferedMessagesAndBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	release := make(chan struct{})
	d := newRecorder(func(context.Context, event.Event, int) error { <-release; return nil })
	var bytes float64
	for range 3 {
		ev := validEvent(t)
		bytes += float64(len(ev.Data()))
		b.send(t, ev)
	}
	b.run(t, d, func(p *source.Params) { p.Metrics = source.NewMetrics(reg) })
	buffered := func(name string) float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() == name {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}
	require.Eventually(t, func() bool { return buffered("aivedio_adapter_buffered_messages") == 3 }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, bytes, buffered("aivedio_adapter_buffered_bytes"))
	close(release)
	require.Eventually(t, func() bool {
		return buffered("aivedio_adapter_buffered_messages") == 0 && buffered("aivedio_adapter_buffered_bytes") == 0
	}, 5*time.Second, 5*time.Millisecond)
	b.requireSettled(t)
}

// TestDeliveryMetrics: a stage that fails twice and then succeeds shows
// as two retries and one ACK of its group, each delivery timed by result:
// the failure rate and retries an operator alerts on.
func TestDeliveryMetrics(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	rec := newRecorder(func(_ context.Context, _ event.Event, attempt int) error {
		if attempt < 3 {
			return errors.New("database unavailable")
		}
		return nil
	})
	ev := validEvent(t)
	b.send(t, ev)
	stop := b.run(t, rec, func(p *source.Params) { p.Metrics = source.NewMetrics(reg) })
	require.Eventually(t, func() bool { return rec.count(ev.ID()) == 3 }, 10*time.Second, 5*time.Millisecond)
	stop()
	families, err := reg.Gather()
	require.NoError(t, err)
	counts, timed := map[string]float64{}, map[string]uint64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			result := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "result" {
					result = lp.GetValue()
				}
			}
			switch f.GetName() {
			case "aivedio_adapter_deliveries_total":
				counts[result] = m.GetCounter().GetValue()
			case "aivedio_adapter_delivery_duration_seconds":
				timed[result] = m.GetHistogram().GetSampleCount()
			}
		}
	}
	require.Equal(t, map[string]float64{"retry": 2, "acked": 1}, counts)
	require.Equal(t, map[string]uint64{"retry": 2, "acked": 1}, timed)
}

// TestRetryAfterOverridesBackoff: a function that asks to be called again
// after a wait (a chunk another delivery holds) gets the message back then,
// not after the adapter's own backoff, and not before.
func TestRetryAfterOverridesBackoff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var first time.Time
	rec := newRecorder(func(_ context.Context, _ event.Event, attempt int) error {
		if attempt == 1 {
			first = time.Now()
			return outcome.RetryAfter("render.chunk_held", errors.New("held by another delivery"), 1200*time.Millisecond)
		}
		if since := time.Since(first); since < time.Second {
			return fmt.Errorf("redelivered after %s, before the wait asked for", since)
		}
		return nil
	})
	ev := validEvent(t)
	b.send(t, ev)
	stop := b.run(t, rec, func(p *source.Params) { p.RetryDelay = func(int) time.Duration { return time.Hour } })
	require.Eventually(t, func() bool { return rec.count(ev.ID()) == 2 }, 10*time.Second, 5*time.Millisecond,
		"the message is back after the function's wait, not the hour of backoff")
	stop()
	b.requireSettled(t)
}

// TestASubscriptionIsNotStarvedByItsSiblings: a group reads two topics; the
// first's deliveries hang and take every worker they can, yet the second's
// event is delivered, because each consumer keeps a worker of its own.
func TestASubscriptionIsNotStarvedByItsSiblings(t *testing.T) {
	t.Parallel()
	slow := catalog.Topic{Name: "t_source_slow", Type: catalog.Normal}
	quick := catalog.Topic{Name: "t_source_quick", Type: catalog.Normal}
	group := catalog.Group{Name: "cg.source.siblings.v1", Stage: "test", MaxDeliveryAttempts: 3,
		Subscriptions: []catalog.Subscription{{Topic: slow}, {Topic: quick}}}
	broker := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	broker.Apply([]catalog.Topic{slow, quick}, []catalog.Group{group})
	var consumers []mq.Consumer
	for _, topic := range []catalog.Topic{slow, quick} {
		c, err := broker.Consumer(group.BrokerName(), map[string]string{topic.BrokerName(): "*"}, 20*time.Millisecond)
		require.NoError(t, err)
		consumers = append(consumers, c)
	}
	send := func(topic catalog.Topic) event.Event {
		ev := validEvent(t)
		_, err := cerocketmq.NewSender(broker.Producer(), topic.BrokerName()).SendMessage(context.Background(), binding.ToMessage(&ev))
		require.NoError(t, err)
		return ev
	}
	hang := make(chan struct{})
	defer close(hang)
	var hanging atomic.Int32
	slowIDs := map[string]bool{}
	for range 6 {
		slowIDs[send(slow).ID()] = true
	}
	d := newRecorder(func(ctx context.Context, ev event.Event, _ int) error {
		if slowIDs[ev.ID()] {
			hanging.Add(1)
			select {
			case <-hang:
			case <-ctx.Done():
			}
			return ctx.Err()
		}
		return nil
	})

	const workers = 3
	ctx, cancel := context.WithCancel(context.Background())
	// Made here, not in the goroutine: a skip (no PostgreSQL) must end the
	// test, which it does only from the test's own goroutine.
	quarantine := dbtest.TestSchema(t)
	done := make(chan error, 1)
	go func() {
		done <- source.New(source.Params{
			Group: group, Consumers: consumers, Deliverer: d, Quarantine: quarantine,
			Workers: workers, Invisible: time.Minute, HandlerTimeout: time.Minute, DrainTimeout: 100 * time.Millisecond,
		}).Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })

	// The slow topic takes its own worker and the shared one.
	require.Eventually(t, func() bool { return hanging.Load() == workers-1 }, 5*time.Second, 5*time.Millisecond)
	quickEv := send(quick)
	require.Eventually(t, func() bool { return d.count(quickEv.ID()) == 1 }, 5*time.Second, 5*time.Millisecond,
		"the quick topic's event waits behind the slow topic's hanging deliveries")
	require.Equal(t, int32(workers-1), hanging.Load(), "the slow topic never takes the quick one's worker")
}
