package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/quarantine"
)

var (
	testTopic = catalog.Topic{Name: "t_dlq", Logical: "t_dlq", Type: catalog.Normal}
	// testGroup gives up after two deliveries.
	testGroup = catalog.Group{Name: "cg.dlq.test.v1", Stage: "test", MaxDeliveryAttempts: 2,
		Subscriptions: []catalog.Subscription{{Topic: testTopic}}}
)

// await is the long poll of every test consumer.
const await = 20 * time.Millisecond

type testBundle struct {
	broker   *memmq.Broker
	producer mq.Producer
	stage    *memmq.Consumer
	pool     *pgxpool.Pool
	reg      *prometheus.Registry
	metrics  *dlq.Metrics // registered with reg; shared by the bundle's drainers
	opens    atomic.Int32 // calls of consumerFunc
}

// setup gives a test its own emulated broker (1 ms minimum invisible time)
// with the stage group and the drain group, and its own database schema.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	b.Apply([]catalog.Topic{testTopic}, []catalog.Group{testGroup, catalog.DLQDrain})
	stage, err := b.Consumer(testGroup.BrokerName(), map[string]string{testTopic.BrokerName(): "*"}, await)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	return &testBundle{broker: b, producer: b.Producer(), stage: stage, pool: dbtest.TestSchema(t), reg: reg, metrics: dlq.NewMetrics(reg)}
}

// deadLetter sends ev, lets the stage group fail it MaxDeliveryAttempts
// times, and receives once more: the broker moves a dead letter lazily, on
// the group's next Receive. It returns the message id.
func (tb *testBundle) deadLetter(t *testing.T, msg *mq.Message) string {
	t.Helper()
	ctx := context.Background()
	id, err := tb.producer.Send(ctx, msg)
	require.NoError(t, err)
	tb.failAll(t, id)
	return id
}

// deadEvent is deadLetter for a valid CloudEvent; it returns the message
// id and the event id.
func (tb *testBundle) deadEvent(t *testing.T) (messageID, eventID string) {
	t.Helper()
	ev := validEvent(t)
	id := sendEvent(context.Background(), t, tb.producer, testTopic.BrokerName(), "test.tag", ev)
	tb.failAll(t, id)
	return id, ev.ID()
}

func (tb *testBundle) failAll(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	for attempt := 1; attempt <= testGroup.MaxDeliveryAttempts; attempt++ {
		rs, err := tb.stage.Receive(ctx, 16, time.Second)
		require.NoError(t, err)
		require.Len(t, rs, 1)
		require.Equal(t, id, rs[0].MessageID)
		require.Equal(t, attempt, rs[0].DeliveryAttempt)
		require.NoError(t, tb.stage.ChangeInvisibleDuration(ctx, rs[0], 0))
	}
	rs, err := tb.stage.Receive(ctx, 16, time.Second)
	require.NoError(t, err)
	require.Empty(t, rs, "the message should have moved to %s", testGroup.DLQTopic())
}

// consumerFunc opens the drain group's consumer of the dead-letter topic
// and maps the emulator's unknown topic to dlq.ErrNoTopic, as local/ wires it.
func (tb *testBundle) consumerFunc(ctx context.Context) (mq.Consumer, error) {
	tb.opens.Add(1)
	c, err := tb.broker.Consumer(catalog.DLQDrain.BrokerName(), map[string]string{testGroup.DLQTopic(): "*"}, await)
	if errors.Is(err, memmq.ErrUnknownTopic) {
		return nil, fmt.Errorf("%w: %w", dlq.ErrNoTopic, err)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// drainConsumer opens the drain group's consumer of the dead-letter
// topic, which must exist.
func (tb *testBundle) drainConsumer(t *testing.T) *memmq.Consumer {
	t.Helper()
	c, err := tb.broker.Consumer(catalog.DLQDrain.BrokerName(), map[string]string{testGroup.DLQTopic(): "*"}, await)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// params are fast drainer settings reading through tb.consumerFunc.
func (tb *testBundle) params(t *testing.T) dlq.Params {
	return dlq.Params{
		Group: testGroup, ConsumerFunc: tb.consumerFunc, DB: tb.pool,
		Invisible: time.Minute, RetryDelay: time.Millisecond, TopicPoll: 10 * time.Millisecond,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond,
		Logger: newTestLogger(t), Metrics: tb.metrics,
	}
}

func (tb *testBundle) drainer(t *testing.T, edit ...func(*dlq.Params)) *dlq.Drainer {
	t.Helper()
	p := tb.params(t)
	for _, f := range edit {
		f(&p)
	}
	d := dlq.New(p)
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// drained reads aivedio_dlq_drained_total of testGroup.
func (tb *testBundle) drained(t *testing.T) float64 {
	t.Helper()
	return tb.counter(t, "aivedio_dlq_drained_total")
}

// counter is the test group's value of a counter of the drainer.
func (tb *testBundle) counter(t *testing.T, name string) float64 {
	t.Helper()
	families, err := tb.reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer_group" && l.GetValue() == testGroup.Name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

func TestDrainOnceQuarantinesDeadLetter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t)
	messageID, eventID := tb.deadEvent(t)
	d := tb.drainer(t)

	n, err := d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)

	got := rows(t, tb.pool)
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, testGroup.Name, r.Consumer, "firm group name, the inbox consumer_name")
	require.Equal(t, messageID, r.MessageID)
	require.NotNil(t, r.EventID)
	require.Equal(t, eventID, *r.EventID)
	require.Equal(t, "%DLQ%cg_dlq_test_v1", r.Topic)
	require.Equal(t, "test.tag", r.Tag)
	require.Equal(t, string(quarantine.SourceDLQ), r.Source)
	require.Equal(t, dlq.ErrorClass, r.ErrorClass)
	require.Equal(t, dlq.ErrorCode, r.ErrorCode)
	require.Contains(t, r.ErrorDetail, "2 delivery attempts")
	require.Equal(t, testGroup.MaxDeliveryAttempts+1, r.DeliveryAttempt, "the attempt count goes on in the drain group")
	require.Equal(t, eventID, r.Properties["CE_id"])
	require.JSONEq(t, `{"n":1}`, string(r.Body))
	require.InDelta(t, 1, tb.drained(t), 0)

	// ACKed: nothing comes again, and nothing is written again.
	n, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Len(t, rows(t, tb.pool), 1)
}

func TestDrainOnceBeforeTheTopicExistsDrainsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t)
	d := tb.drainer(t)

	n, err := d.DrainOnce(ctx)
	require.NoError(t, err, "a dead-letter topic that does not exist yet is nothing to drain")
	require.Zero(t, n)

	tb.deadEvent(t)
	n, err = d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, rows(t, tb.pool), 1)
	require.EqualValues(t, 2, tb.opens.Load(), "opened again once the topic exists")
}

func TestSecondCopyOfAMessageWritesNoSecondRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t)
	messageID, _ := tb.deadEvent(t)

	// Catch the dead letter on its way, so that a copy can be handed in later.
	c := &recordingConsumer{Consumer: tb.drainConsumer(t)}
	n, err := tb.drainer(t, withConsumer(c)).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Len(t, c.received, 1)

	// The same message id again, later in its life (e.g. dead-lettered again
	// after a replay, or a broker duplicate).
	dup := *c.received[0]
	dup.DeliveryAttempt += 5
	fake := &fakeConsumer{pending: []*mq.Received{&dup}}
	n, err = tb.drainer(t, withConsumer(fake)).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{messageID}, fake.acked, "the copy is ACKed")

	got := rows(t, tb.pool)
	require.Len(t, got, 1, "one row per consumer, event and payload")
	require.Equal(t, testGroup.MaxDeliveryAttempts+6, got[0].DeliveryAttempt, "the latest attempt seen")
	var count int
	require.NoError(t, tb.pool.QueryRow(ctx, `SELECT delivery_count FROM message_quarantine`).Scan(&count))
	require.Equal(t, testGroup.MaxDeliveryAttempts+1, count, "the group's attempts, then one repeat")
}

func TestDrainerKilledBetweenWriteAndAckLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t)
	tb.deadEvent(t)

	// The first drainer writes the row and "dies" before its ACK reaches
	// the broker: the ACK is dropped.
	dying := &recordingConsumer{Consumer: tb.drainConsumer(t), dropAcks: true}
	_, err := tb.drainer(t, withConsumer(dying), func(p *dlq.Params) { p.Invisible = 50 * time.Millisecond }).DrainOnce(ctx)
	require.NoError(t, err)
	require.Len(t, rows(t, tb.pool), 1)

	// The restarted drainer gets the message again and settles it.
	d := tb.drainer(t)
	require.Eventually(t, func() bool {
		n, err := d.DrainOnce(ctx)
		require.NoError(t, err)
		return n == 1
	}, 5*time.Second, time.Millisecond)
	require.Len(t, rows(t, tb.pool), 1)
	n, err := d.DrainOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "settled for good")
}

func TestFailedWriteIsNotAckedAndComesBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t)
	first, _ := tb.deadEvent(t)
	second, _ := tb.deadEvent(t)

	db := &failingDB{}
	d := tb.drainer(t, func(p *dlq.Params) { p.DB = db })
	n, err := d.DrainOnce(ctx)
	require.ErrorContains(t, err, "database is down")
	require.Zero(t, n)
	require.EqualValues(t, 1, db.calls.Load(), "the rest of the batch is handed back untried")
	require.Empty(t, rows(t, tb.pool))
	require.Zero(t, tb.drained(t))

	// Both come back after RetryDelay (1 ms), long before their invisible
	// minute: handed back, not abandoned.
	d = tb.drainer(t)
	got := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 2 {
		require.True(t, time.Now().Before(deadline), "dead letters did not come back")
		_, err := d.DrainOnce(ctx)
		require.NoError(t, err)
		for _, r := range rows(t, tb.pool) {
			got[r.MessageID] = true
			require.Greater(t, r.DeliveryAttempt, testGroup.MaxDeliveryAttempts+1, "delivered again")
		}
	}
	require.Equal(t, map[string]bool{first: true, second: true}, got)
}

func TestMessageThatIsNoCloudEventIsQuarantinedWithoutEventID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tb := setup(t)
	id := tb.deadLetter(t, &mq.Message{Topic: testTopic.BrokerName(), Tag: "raw", Keys: []string{"k"},
		Properties: map[string]string{"p": "v"}, Body: []byte("not json")})

	n, err := tb.drainer(t).DrainOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got := rows(t, tb.pool)
	require.Len(t, got, 1)
	require.Equal(t, id, got[0].MessageID)
	require.Nil(t, got[0].EventID)
	require.Equal(t, []byte("not json"), got[0].Body)
	require.Equal(t, map[string]string{"p": "v"}, got[0].Properties)
}

func TestRunWaitsForTheTopicThenDrains(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	stop := run(t, tb.drainer(t))

	require.Eventually(t, func() bool { return tb.opens.Load() >= 3 }, 5*time.Second, time.Millisecond,
		"Run keeps looking for the dead-letter topic")
	_, eventID := tb.deadEvent(t)
	require.Eventually(t, func() bool { return len(rows(t, tb.pool)) == 1 }, 5*time.Second, 5*time.Millisecond)
	stop()
	got := rows(t, tb.pool)
	require.Equal(t, eventID, *got[0].EventID)
	require.InDelta(t, 1, tb.drained(t), 0)
}

func TestRunRetriesFailuresAndNeverGivesUp(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deadEvent(t)
	db := &failingDB{next: tb.pool, failures: 3}
	stop := run(t, tb.drainer(t, func(p *dlq.Params) { p.DB = db }))

	require.Eventually(t, func() bool { return len(rows(t, tb.pool)) == 1 }, 5*time.Second, 5*time.Millisecond)
	stop()
	require.EqualValues(t, 4, db.calls.Load(), "three failed writes, then one that worked")
	require.InDelta(t, 1, tb.drained(t), 0)
	require.InDelta(t, 3, tb.counter(t, "aivedio_dlq_drain_errors_total"), 0, "each failed cycle is counted")
}

func TestNewRequiresItsDependencies(t *testing.T) {
	t.Parallel()
	c := &fakeConsumer{}
	f := func(context.Context) (mq.Consumer, error) { return c, nil }
	db := &failingDB{}
	for name, p := range map[string]dlq.Params{
		"no group":    {Consumer: c, DB: db},
		"no db":       {Group: testGroup, Consumer: c},
		"no consumer": {Group: testGroup, DB: db},
		"both":        {Group: testGroup, DB: db, Consumer: c, ConsumerFunc: f},
	} {
		require.Panics(t, func() { dlq.New(p) }, name)
	}
}

// run starts d.Run and returns its stop function, which waits for Run to
// return nil.
func run(t *testing.T, d *dlq.Drainer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
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

func withConsumer(c mq.Consumer) func(*dlq.Params) {
	return func(p *dlq.Params) { p.Consumer, p.ConsumerFunc = c, nil }
}

// recordingConsumer keeps what it received; with dropAcks it answers every
// Ack with success and settles nothing, like a process that died before
// its ACK reached the broker.
type recordingConsumer struct {
	mq.Consumer
	dropAcks bool
	mu       sync.Mutex
	received []*mq.Received
}

func (c *recordingConsumer) Receive(ctx context.Context, n int, invisible time.Duration) ([]*mq.Received, error) {
	rs, err := c.Consumer.Receive(ctx, n, invisible)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range rs {
		cp := *r
		c.received = append(c.received, &cp)
	}
	return rs, err
}

func (c *recordingConsumer) Ack(ctx context.Context, msg *mq.Received) error {
	if c.dropAcks {
		return nil
	}
	return c.Consumer.Ack(ctx, msg)
}

// fakeConsumer hands out pending once and records what was settled.
type fakeConsumer struct {
	mu      sync.Mutex
	pending []*mq.Received
	acked   []string
}

func (c *fakeConsumer) Receive(context.Context, int, time.Duration) ([]*mq.Received, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.pending
	c.pending = nil
	return rs, nil
}

func (c *fakeConsumer) Ack(_ context.Context, msg *mq.Received) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.acked = append(c.acked, msg.MessageID)
	return nil
}

func (c *fakeConsumer) ChangeInvisibleDuration(context.Context, *mq.Received, time.Duration) error {
	return errors.New("fakeConsumer: unexpected ChangeInvisibleDuration")
}

// failingDB fails its first failures statements (every one when next is
// nil) and passes the rest to next. Only Exec is used.
type failingDB struct {
	quarantine.Execer
	next     quarantine.Execer
	failures int32
	calls    atomic.Int32
}

func (db *failingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if n := db.calls.Add(1); db.next == nil || n <= db.failures {
		return pgconn.CommandTag{}, errors.New("database is down")
	}
	return db.next.Exec(ctx, sql, args...)
}

func (db *failingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !strings.Contains(sql, "INSERT INTO message_quarantine") { // a read before the write; the write is what fails
		if db.next == nil {
			return noRow{}
		}
		return db.next.QueryRow(ctx, sql, args...)
	}
	if n := db.calls.Add(1); db.next == nil || n <= db.failures {
		return pgxErrRow{}
	}
	return db.next.QueryRow(ctx, sql, args...)
}

type pgxErrRow struct{}

func (pgxErrRow) Scan(...any) error { return errors.New("database is down") }

type noRow struct{}

func (noRow) Scan(...any) error { return pgx.ErrNoRows }

// newTestLogger writes the drainer's log to the test's output.
func newTestLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}
