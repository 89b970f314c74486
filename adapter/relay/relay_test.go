package relay_test

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/memmq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/outbox"
)

type testBundle struct {
	broker *memmq.Broker
	pool   *pgxpool.Pool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := memmq.New(&memmq.Opts{MinInvisible: time.Millisecond})
	b.Apply(catalog.Topics(), []catalog.Group{{Name: "g_test", MaxDeliveryAttempts: 3}, {Name: "g_test_fifo", MaxDeliveryAttempts: 3, Orderly: true}})
	return &testBundle{broker: b, pool: dbtest.TestSchema(t)}
}

func (b *testBundle) write(t *testing.T, events ...outbox.Event) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, events...) }))
}

func (b *testBundle) relay(owner string) *relay.Relay {
	return relay.New(relay.Params{Pool: b.pool, Producer: b.broker.Producer(), Owner: owner, Batch: 8,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
}

// receiveAll reads everything group g can see on topic until it stays empty.
func (b *testBundle) receiveAll(t *testing.T, g string, topic catalog.Topic) []*mq.Received {
	t.Helper()
	c, err := b.broker.Consumer(g, map[string]string{topic.BrokerName(): "*"}, 100*time.Millisecond)
	require.NoError(t, err)
	var got []*mq.Received
	for {
		batch, err := c.Receive(context.Background(), 32, time.Minute)
		require.NoError(t, err)
		if len(batch) == 0 {
			return got
		}
		for _, m := range batch {
			require.NoError(t, c.Ack(context.Background(), m))
		}
		got = append(got, batch...)
	}
}

// TestBrokerDownKeepsTheOutboxGrowing: while the broker is down, writes
// still commit and the relay records its failures; once the broker is back
// the backlog drains and nothing is lost.
func TestBrokerDownKeepsTheOutboxGrowing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.relay("r1")
	b.broker.SetDown(true)

	var written []outbox.Event
	for range 20 {
		e := event(t, catalog.GenerationSubmit, "down", "", time.Time{})
		written = append(written, e)
		b.write(t, e)
	}
	for range 3 {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
	}
	count, _, err := outbox.Pending(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, 20, count)
	var failed int
	var code string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*), max(last_error_code) FROM outbox_events WHERE publish_attempts > 0`).Scan(&failed, &code))
	require.Positive(t, failed)
	require.Equal(t, "publish_failed", code)

	b.broker.SetDown(false)
	require.Eventually(t, func() bool {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
		count, _, err := outbox.Pending(ctx, b.pool)
		require.NoError(t, err)
		return count == 0
	}, 10*time.Second, 5*time.Millisecond)

	got := b.receiveAll(t, "g_test", catalog.GenerationSubmit)
	ids := map[string]int{}
	for _, m := range got {
		ids[m.Keys[0]]++
	}
	for _, e := range written {
		require.Equal(t, 1, ids[e.Envelope.EventID], "published exactly once after the outage")
	}
}

// TestRelaysShareTheWork: several relays at once publish every row once.
func TestRelaysShareTheWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const n = 200
	var events []outbox.Event
	for range n {
		events = append(events, event(t, catalog.GenerationSubmit, "shared", "", time.Time{}))
	}
	b.write(t, events...)

	var wg sync.WaitGroup
	for _, owner := range []string{"r1", "r2", "r3"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := b.relay(owner)
			for {
				n, err := r.RunOnce(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	wg.Wait()
	got := b.receiveAll(t, "g_test", catalog.GenerationSubmit)
	require.Len(t, got, n, "every row published once: SKIP LOCKED keeps relays off each other's rows")
	var owners int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE lease_owner IS NOT NULL OR published_at IS NULL`).Scan(&owners))
	require.Zero(t, owners)
}

// TestFIFOGroupWaitsForItsHead: a FIFO group whose first event cannot be
// published holds its later events back, so the group stays in order, while
// other groups go on.
func TestFIFOGroupWaitsForItsHead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	r := b.relay("r1")
	var groupA []outbox.Event
	for range 3 {
		groupA = append(groupA, event(t, catalog.GenerationStateFIFO, "fifo", "task-a", time.Time{}))
	}
	groupB := event(t, catalog.GenerationStateFIFO, "fifo", "task-b", time.Time{})
	b.write(t, groupA...)
	b.write(t, groupB)
	// Task A's head cannot be published (as a broker that refuses it would).
	_, err := b.pool.Exec(ctx, `UPDATE outbox_events SET available_at = now() + interval '1 hour' WHERE event_id = $1`, groupA[0].Envelope.EventID)
	require.NoError(t, err)

	for range 3 {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
	}
	got := b.receiveAll(t, "g_test_fifo", catalog.GenerationStateFIFO)
	require.Len(t, got, 1)
	require.Equal(t, groupB.Envelope.EventID, got[0].Keys[0])

	_, err = b.pool.Exec(ctx, `UPDATE outbox_events SET available_at = now() WHERE event_id = $1`, groupA[0].Envelope.EventID)
	require.NoError(t, err)
	for range 5 {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
	}
	got = b.receiveAll(t, "g_test_fifo", catalog.GenerationStateFIFO)
	require.Len(t, got, 3)
	for i, m := range got {
		require.Equal(t, groupA[i].Envelope.EventID, m.Keys[0], "task A in the order written")
	}
}

// TestPublishMetrics: the producer's sends are counted by topic, its
// failures by topic and error code, and every send, failed or not, is
// timed by topic, so the send latency's quantiles can be read.
func TestPublishMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reg := prometheus.NewRegistry()
	r := relay.New(relay.Params{Pool: b.pool, Producer: b.broker.Producer(), Owner: "metrics", Batch: 8,
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, Metrics: relay.NewMetrics(reg)})
	b.broker.SetDown(true)
	b.write(t, event(t, catalog.GenerationSubmit, "m", "", time.Time{}))
	_, err := r.RunOnce(ctx)
	require.NoError(t, err)
	b.broker.SetDown(false)
	for range 3 {
		b.write(t, event(t, catalog.GenerationSubmit, "m", "", time.Time{}))
	}
	require.Eventually(t, func() bool {
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
		count, _, err := outbox.Pending(ctx, b.pool)
		require.NoError(t, err)
		return count == 0
	}, 5*time.Second, 5*time.Millisecond)

	topic := catalog.GenerationSubmit.Name
	require.Equal(t, 4.0, counter(t, reg, "aivedio_relay_published_total", map[string]string{"topic": topic}))
	require.Equal(t, 1.0, counter(t, reg, "aivedio_relay_publish_failures_total", map[string]string{"topic": topic, "code": "publish_failed"}))
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "aivedio_relay_publish_duration_seconds" {
			h := f.GetMetric()[0].GetHistogram()
			require.Equal(t, uint64(5), h.GetSampleCount(), "every send is timed, the failed one too")
			require.Equal(t, topic, f.GetMetric()[0].GetLabel()[0].GetValue())
			return
		}
	}
	t.Fatal("no aivedio_relay_publish_duration_seconds")
}

// counter is the value of name's sample with exactly labels; -1 without one.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			if maps.Equal(got, labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return -1
}

// TestBacklogGauges: while the broker refuses sends, the relay exports the
// unpublished rows and the age of the oldest; once they are published the
// gauges fall to zero.
func TestBacklogGauges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	b.broker.SetDown(true)
	for range 3 {
		b.write(t, event(t, catalog.GenerationSubmit, "m", "", time.Time{}))
	}
	time.Sleep(50 * time.Millisecond) // an age the gauge can show
	r := relay.New(relay.Params{Pool: b.pool, Producer: b.broker.Producer(), Owner: "gauges", Batch: 8,
		BackoffBase: time.Millisecond, BackoffMax: 10 * time.Millisecond, Metrics: relay.NewMetrics(reg)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	require.Eventually(t, func() bool { return gauge(t, reg, "aivedio_outbox_unpublished") == 3 }, 5*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, gauge(t, reg, "aivedio_outbox_oldest_age_seconds"), 0.05)
	b.broker.SetDown(false)
	require.Eventually(t, func() bool {
		return gauge(t, reg, "aivedio_outbox_unpublished") == 0 && gauge(t, reg, "aivedio_outbox_oldest_age_seconds") == 0
	}, 15*time.Second, 50*time.Millisecond, "the backlog is sampled every 5 s")
}

// gauge is the value of an unlabeled gauge; -1 without one.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
