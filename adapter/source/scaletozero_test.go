package source_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/pg"
)

// TestScaleFromZero runs the whole source adapter against a stage function
// that is scaled to zero when the messages arrive: its port refuses
// connections, then it answers 503 while it starts (what a Knative pod
// that is not ready yet answers), then it serves. With the cold-start
// budget (SOURCE_COLD_START) each message is received once, delivered once,
// and ACKed: the broker's delivery attempt count stays at 1 for every
// message, none is handed back, none is lost or quarantined. Without the
// budget the same start burns delivery attempts, which is what the budget
// is for (and what, over a longer start, would send messages to the
// dead-letter topic).
func TestScaleFromZero(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		coldStart time.Duration
		burns     bool // whether messages are expected to spend attempts
	}{
		{"waits out the cold start within one delivery", 10 * time.Second, false},
		{"without a cold-start budget attempts are spent", time.Nanosecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const events = 24
			broker := newColdBroker(t)
			fn, handled := countingStage()
			addr, unready := startColdFunction(t, fn, 500*time.Millisecond, 500*time.Millisecond)
			var quarantine coldQuarantine

			ids := map[string]bool{}
			for range events {
				ev := validEvent(t)
				ids[ev.ID()] = true
				_, err := cerocketmq.NewSender(broker.producer, coldTopic.BrokerName()).SendMessage(context.Background(), binding.ToMessage(&ev))
				require.NoError(t, err)
			}

			src := source.New(source.Params{
				Group: coldGroup, Consumers: []mq.Consumer{broker.consumer}, Quarantine: &quarantine,
				Deliverer: delivery.NewHTTP("http://"+addr, 4, tt.coldStart),
				Workers:   4, Invisible: time.Minute, HandlerTimeout: 30 * time.Second,
				RetryDelay: func(int) time.Duration { return 100 * time.Millisecond },
			})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- src.Run(ctx) }()
			require.Eventually(t, func() bool { return broker.consumer.ackedCount() == events }, 30*time.Second, 10*time.Millisecond,
				"every message is ACKed once the function is up")
			cancel()
			require.NoError(t, <-done)

			require.Positive(t, unready.Load(), "the function answered 503 while it started")
			require.Zero(t, quarantine.calls.Load(), "a cold start is no poison")
			require.Zero(t, broker.consumer.ackErrors.Load(), "no ACK came after its message's invisible time")
			for id := range ids {
				require.Equal(t, 1, handled.count(id), "event %s: its work runs once", id)
			}
			attempts := broker.consumer.attempts()
			require.Len(t, attempts, events, "every message was received")
			if !tt.burns {
				for id, seen := range attempts {
					require.Equal(t, []int{1}, seen, "message %s: received once, at delivery attempt 1", id)
				}
				require.Zero(t, broker.consumer.handedBack.Load(), "no message went back to the broker")
				return
			}
			require.Positive(t, broker.consumer.handedBack.Load())
			burned := 0
			for _, seen := range attempts {
				if len(seen) > 1 {
					burned++
				}
			}
			require.Positive(t, burned, "without the budget, messages come back with higher attempt counts")
		})
	}
}

var (
	coldTopic = catalog.Topic{Name: "t_cold_start", Type: catalog.Normal}
	// coldGroup allows many attempts so that the run without a budget ends
	// in ACKs, not in the dead-letter topic, and its attempts can be counted.
	coldGroup = catalog.Group{Name: "cg.cold.start.test.v1", Stage: "test", MaxDeliveryAttempts: 100,
		Subscriptions: []catalog.Subscription{{Topic: coldTopic}}}
)

type coldBroker struct {
	producer mq.Producer
	consumer *recordingConsumer
}

// newColdBroker is an in-process broker with the proxy's defaults (a
// received message stays invisible for at least 10 s), holding coldTopic
// and coldGroup.
func newColdBroker(t *testing.T) *coldBroker {
	t.Helper()
	b := memmq.New(nil)
	b.Apply([]catalog.Topic{coldTopic}, []catalog.Group{coldGroup})
	c, err := b.Consumer(coldGroup.BrokerName(), map[string]string{coldTopic.BrokerName(): "*"}, 50*time.Millisecond)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &coldBroker{producer: b.Producer(), consumer: &recordingConsumer{Consumer: c, seen: map[string][]int{}}}
}

// recordingConsumer records, per message, the delivery attempt of every
// time the broker handed it out, and counts ACKs and hand-backs.
type recordingConsumer struct {
	mq.Consumer
	mu         sync.Mutex
	seen       map[string][]int // message id -> delivery attempts received
	acked      int
	ackErrors  atomic.Int32
	handedBack atomic.Int32
}

func (c *recordingConsumer) Receive(ctx context.Context, n int, invisible time.Duration) ([]*mq.Received, error) {
	msgs, err := c.Consumer.Receive(ctx, n, invisible)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		c.seen[m.MessageID] = append(c.seen[m.MessageID], m.DeliveryAttempt)
	}
	return msgs, err
}

func (c *recordingConsumer) Ack(ctx context.Context, msg *mq.Received) error {
	err := c.Consumer.Ack(ctx, msg)
	if err != nil {
		c.ackErrors.Add(1)
		return err
	}
	c.mu.Lock()
	c.acked++
	c.mu.Unlock()
	return nil
}

func (c *recordingConsumer) ChangeInvisibleDuration(ctx context.Context, msg *mq.Received, d time.Duration) error {
	c.handedBack.Add(1)
	return c.Consumer.ChangeInvisibleDuration(ctx, msg, d)
}

func (c *recordingConsumer) ackedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked
}

func (c *recordingConsumer) attempts() map[string][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string][]int, len(c.seen))
	for id, a := range c.seen {
		out[id] = append([]int(nil), a...)
	}
	return out
}

// handledEvents counts how often the stage's work ran per event id.
type handledEvents struct {
	mu sync.Mutex
	n  map[string]int
}

func (h *handledEvents) count(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[id]
}

// countingStage is a stage function whose work counts the events it did.
func countingStage() (*stage.Function, *handledEvents) {
	h := &handledEvents{n: map[string]int{}}
	fn := stage.New(stage.Params{Name: "test", EventTypes: []string{"test.happened"},
		Work: func(_ context.Context, env envelope.Envelope) error {
			h.mu.Lock()
			h.n[env.EventID]++
			h.mu.Unlock()
			return nil
		}})
	return fn, h
}

// startColdFunction serves fn on a port that refuses connections for
// down, then answers 503 for warming, then serves. It returns the address
// and the number of 503s answered.
func startColdFunction(t *testing.T, fn *stage.Function, down, warming time.Duration) (string, *atomic.Int32) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // refused until the function starts

	var unready atomic.Int32
	serve := serveStage(fn)
	started := make(chan *http.Server, 1)
	go func() {
		time.Sleep(down)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			started <- nil // the deliveries then fail, and the test says so
			return
		}
		warm := time.Now().Add(warming)
		srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if time.Now().Before(warm) {
				unready.Add(1)
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			serve.ServeHTTP(w, r)
		})}
		started <- srv
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		if srv := <-started; srv != nil {
			_ = srv.Close()
		}
	})
	return addr, &unready
}

// serveStage answers each binary-mode CloudEvent with fn's status, on the
// request's own goroutine, as the stage image does
// (functions/cmd/function). func-go's own handler is not used here: with
// several requests in flight it can leave one waiting for the next request
// (cloudevents/sdk-go issues 1224 and 1332), which this test would see as a
// delivery that times out, not as a cold start.
func serveStage(fn *stage.Function) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		status := http.StatusOK
		if _, err := fn.Handle(r.Context(), *ev); err != nil {
			status = http.StatusInternalServerError
			var result *cehttp.Result
			if errors.As(err, &result) {
				status = result.StatusCode
			}
		}
		w.WriteHeader(status)
	})
}

// coldQuarantine is a database in which nothing may be quarantined; a
// failed delivery's record is allowed (a cold start that outlasts its
// budget is retried like any failure).
type coldQuarantine struct {
	pg.Querier // only Exec and QueryRow are used
	calls      atomic.Int32
}

func (q *coldQuarantine) Exec(_ context.Context, sql string, _ ...any) (pgconn.CommandTag, error) {
	if strings.Contains(sql, "message_quarantine") {
		q.calls.Add(1)
	}
	return pgconn.CommandTag{}, nil
}

func (q *coldQuarantine) QueryRow(_ context.Context, sql string, _ ...any) pgx.Row {
	if strings.Contains(sql, "message_quarantine") {
		q.calls.Add(1)
	}
	return noRow{}
}

type noRow struct{}

func (noRow) Scan(...any) error { return pgx.ErrNoRows }
