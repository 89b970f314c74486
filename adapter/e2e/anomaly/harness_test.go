package anomaly_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

// kernel is one test's pipeline around one consumer group: a migrated
// database schema of its own, and a broker, either the emulator
// (emulator_test.go) or the real proxy (realbroker_test.go). The scenarios
// are written once against it and run on both.
type kernel struct {
	pool  *pgxpool.Pool
	run   string // events of other runs are stale no-ops for this test's stage
	topic catalog.Topic
	tag   string
	group catalog.Group

	producer mq.Producer
	// consumer opens one more consumer of the group; leave closes it, at
	// the latest at cleanup.
	consumer func(t *testing.T) (c mq.Consumer, leave func())
	// dlq opens the group's dead-letter topic for a drainer; nil when the
	// kernel has none.
	dlq dlq.ConsumerFunc
	// invisible is the receive invisible duration sources use: as short as
	// the broker takes.
	invisible time.Duration
	// lag bounds how late the broker redelivers a message after its
	// invisible duration ended (the proxy revives in steps of seconds).
	lag time.Duration
}

// payload is what the test events carry.
type payload struct {
	Run  string `json:"run"`
	Seq  int    `json:"seq"`
	Kind string `json:"kind,omitempty"`
}

// Kinds of event: how the effect stage treats one.
const (
	kindNormal = ""
	// kindPoison fails retryably on every delivery.
	kindPoison = "poison"
	// kindSlowBefore stalls on its first delivery before the inbox
	// transaction, as a provider call or an ffmpeg run would.
	kindSlowBefore = "slow_before"
	// kindSlowInside stalls on its first delivery inside the inbox
	// transaction, holding the event's inbox row.
	kindSlowInside = "slow_inside"
)

// pool opens a pool on a new migrated schema, with room for the
// connections several adapters, a relay and a drainer hold at once.
func pool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(dbtest.TestSchemaURL(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set("pool_max_conns", "24")
	u.RawQuery = q.Encode()
	p, err := pgxpool.New(context.Background(), u.String())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	// No unique key on purpose: a second effect of one event must show.
	_, err = p.Exec(context.Background(), `CREATE TABLE effects (
		event_id uuid NOT NULL, seq int NOT NULL, applied_by text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	return p
}

// event builds an outbox event of the kernel's run.
func (k *kernel) event(t *testing.T, seq int, kind string) outbox.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventSettleRequested, Producer: "anomaly", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(),
		Payload: payload{Run: k.run, Seq: seq, Kind: kind},
	})
	require.NoError(t, err)
	return outbox.Event{Envelope: env, Topic: k.topic, Tag: k.tag}
}

// events builds n events of one kind, numbered from first.
func (k *kernel) events(t *testing.T, first, n int, kind string) []outbox.Event {
	t.Helper()
	out := make([]outbox.Event, 0, n)
	for i := range n {
		out = append(out, k.event(t, first+i, kind))
	}
	return out
}

// write commits events to the outbox, 25 per transaction.
func (k *kernel) write(t *testing.T, events []outbox.Event) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < len(events); i += 25 {
		chunk := events[i:min(i+25, len(events))]
		require.NoError(t, pgx.BeginFunc(ctx, k.pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, chunk...) }))
	}
}

// ids returns the event ids of events.
func ids(events []outbox.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Envelope.EventID
	}
	return out
}

// startRelay runs a relay publishing through p until the test ends or stop
// is called.
func (k *kernel) startRelay(t *testing.T, p mq.Producer, owner string) (stop func()) {
	t.Helper()
	r := relay.New(relay.Params{Pool: k.pool, Producer: p, Owner: owner, Poll: 50 * time.Millisecond,
		BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, Logger: testLogger(t, "relay")})
	return background(t, r.Run)
}

// startSource runs a source adapter of the kernel's group reading c and
// delivering to d until the test ends or stop is called. Defaults: 4
// workers, the kernel's invisible duration, handler timeout just below it,
// a retry after 100 ms, and a drain of 5 s at stop.
func (k *kernel) startSource(t *testing.T, c mq.Consumer, d delivery.Deliverer, edit ...func(*source.Params)) (stop func()) {
	t.Helper()
	p := source.Params{Group: k.group, Consumers: []mq.Consumer{c}, Deliverer: d, Quarantine: k.pool,
		Workers: 4, Invisible: k.invisible, HandlerTimeout: k.invisible * 9 / 10,
		RetryDelay: func(int) time.Duration { return 100 * time.Millisecond }, DrainTimeout: 5 * time.Second,
		Logger: testLogger(t, "source")}
	for _, f := range edit {
		f(&p)
	}
	return background(t, source.New(p).Run)
}

// startDrainer runs the DLQ drainer of the kernel's group.
func (k *kernel) startDrainer(t *testing.T) (stop func()) {
	t.Helper()
	d := dlq.New(dlq.Params{Group: k.group, ConsumerFunc: k.dlq, DB: k.pool, TopicPoll: 200 * time.Millisecond,
		RetryDelay: time.Second, BackoffBase: 100 * time.Millisecond, BackoffMax: time.Second, Logger: testLogger(t, "dlq")})
	return background(t, d.Run)
}

// background runs fn until stop is called or the test ends; stop waits for
// fn to return and fails the test on its error.
func background(t *testing.T, fn func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
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

// closer returns a function that closes c once, and calls it at cleanup.
func closer(t *testing.T, c interface{ Close() error }) func() {
	var once sync.Once
	leave := func() { once.Do(func() { _ = c.Close() }) }
	t.Cleanup(leave)
	return leave
}

// testLogger writes warnings and errors to the test's output.
func testLogger(t *testing.T, component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("component", component))
}

// effectStage is a stage whose business effect is one row in effects per
// event, written in the inbox transaction. Kinds of event make it fail or
// stall (see the kind constants); obs sees every delivery.
type effectStage struct {
	k     *kernel
	label string        // recorded as applied_by: which adapter applied the effect
	busy  time.Duration // how long every delivery works before its inbox transaction
	stall time.Duration // how long a slow kind's first delivery stalls
	obs   *observer

	// hold, once set, keeps every new delivery in the handler until its
	// context ends, as work caught mid-step by a stop is; held counts them.
	hold atomic.Bool
	held atomic.Int64
}

// function is the stage as the source adapter calls it in process.
func (s *effectStage) function() delivery.Func {
	return stage.New(stage.Params{Name: "anomaly", EventTypes: []string{catalog.EventSettleRequested}, Work: s.work}).Handle
}

func (s *effectStage) work(ctx context.Context, ev envelope.Envelope) error {
	var p payload
	if err := json.Unmarshal(ev.Payload, &p); err != nil {
		return outcome.Permanent("payload.malformed", err)
	}
	first := s.obs.begin(ev.EventID)
	defer s.obs.end(ev.EventID)
	if s.hold.Load() {
		s.held.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	if p.Run == s.k.run {
		if err := sleep(ctx, s.busy); err != nil {
			return err
		}
		switch {
		case p.Kind == kindPoison:
			return outcome.Retryable("dependency.unavailable", errors.New("the dependency this event needs is down"))
		case p.Kind == kindSlowBefore && first:
			if err := sleep(ctx, s.stall); err != nil {
				return err
			}
		}
	}
	out, err := inbox.Do(ctx, s.k.pool, s.k.group.Name, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		if p.Run != s.k.run {
			return inbox.StaleNoop, nil
		}
		if p.Kind == kindSlowInside && first {
			if err := sleep(ctx, s.stall); err != nil {
				return "", err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, seq, applied_by) VALUES ($1, $2, $3)`, ev.EventID, p.Seq, s.label)
		return inbox.Applied, err
	})
	if err == nil && out.Duplicate {
		s.obs.duplicate(ev.EventID)
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// observer records what the stage saw of each event.
type observer struct {
	mu   sync.Mutex
	seen map[string]*seen
}

// seen is one event's record.
type seen struct {
	deliveries int
	running    int
	// overlapped: a delivery began while an earlier one was still running.
	overlapped bool
	// duplicates: deliveries the inbox found already applied.
	duplicates int
	// finished is when the last delivery returned.
	finished time.Time
}

func newObserver() *observer { return &observer{seen: map[string]*seen{}} }

// begin records a delivery and reports whether it is the event's first.
func (o *observer) begin(id string) (first bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.seen[id]
	if s == nil {
		s = &seen{}
		o.seen[id] = s
	}
	s.deliveries++
	s.running++
	if s.running > 1 {
		s.overlapped = true
	}
	return s.deliveries == 1
}

func (o *observer) end(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen[id].running--
	o.seen[id].finished = time.Now()
}

func (o *observer) duplicate(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seen[id].duplicates++
}

// of returns a copy of the record of event id.
func (o *observer) of(id string) seen {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.seen[id]; s != nil {
		return *s
	}
	return seen{}
}

// effects returns how many effect rows each event has.
func (k *kernel) effects(t *testing.T) map[string]int {
	t.Helper()
	rows, err := k.pool.Query(context.Background(), `SELECT event_id::text, count(*) FROM effects GROUP BY event_id`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// waitForEffects waits until every event of want has its effect.
func (k *kernel) waitForEffects(t *testing.T, want []string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := k.effects(t)
		missing := 0
		for _, id := range want {
			if got[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events still without their effect after %s", missing, len(want), within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// requireExactlyOnce fails unless each event of want has exactly one
// effect and no other event has any.
func (k *kernel) requireExactlyOnce(t *testing.T, want []string) {
	t.Helper()
	got := k.effects(t)
	for _, id := range want {
		require.Equal(t, 1, got[id], "effects of event %s", id)
	}
	require.Len(t, got, len(want), "effects of events that should have none")
}

// quarantined is a message_quarantine row as the tests read it.
type quarantined struct {
	eventID, errorClass, errorCode, errorDetail, source string
	attempt                                             int
}

// quarantine returns the group's quarantine rows by event id.
func (k *kernel) quarantine(t *testing.T) map[string]quarantined {
	t.Helper()
	rows, err := k.pool.Query(context.Background(), `
		SELECT coalesce(event_id::text, ''), error_class, error_code, coalesce(error_detail, ''), source, delivery_attempt
		FROM message_quarantine WHERE consumer_name = $1`, k.group.Name)
	require.NoError(t, err)
	out := map[string]quarantined{}
	for rows.Next() {
		var q quarantined
		require.NoError(t, rows.Scan(&q.eventID, &q.errorClass, &q.errorCode, &q.errorDetail, &q.source, &q.attempt))
		_, dup := out[q.eventID]
		require.False(t, dup, "event %s quarantined twice", q.eventID)
		out[q.eventID] = q
	}
	require.NoError(t, rows.Err())
	return out
}

// deliveryLog wraps a source adapter's deliverer: it counts the
// deliveries running now and those its adapter abandoned at stop.
type deliveryLog struct {
	next delivery.Deliverer

	mu        sync.Mutex
	running   int
	abandoned int
}

func (d *deliveryLog) Deliver(ctx context.Context, ev event.Event) error {
	d.mu.Lock()
	d.running++
	d.mu.Unlock()
	err := d.next.Deliver(ctx, ev)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.running--
	if err != nil && errors.Is(ctx.Err(), context.Canceled) {
		d.abandoned++
	}
	return err
}

// counts returns the deliveries running now and those abandoned so far.
func (d *deliveryLog) counts() (running, abandoned int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running, d.abandoned
}
