//go:build !race

package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

// payload is what the test events carry.
type payload struct {
	Run    string `json:"run"`
	Seq    int    `json:"seq"`
	Tenant string `json:"tenant,omitempty"` // when set and not the envelope's: a tenant mismatch
}

// createEffects adds the table the test stage writes its one effect per
// event to. No unique key on purpose: a duplicate effect must show.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE effects (event_id uuid NOT NULL, seq int NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
}

// effectStage is a stage whose work is one effect row per event inside the
// inbox transaction. Events of other runs (left on a shared broker by
// earlier runs) are stale no-ops.
func effectStage(pool *pgxpool.Pool, consumer, eventType, run string) *stage.Function {
	return stage.New(stage.Params{
		Name:       "effect",
		EventTypes: []string{eventType},
		Work: func(ctx context.Context, ev envelope.Envelope) error {
			var p payload
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				return outcome.Permanent("payload.malformed", err)
			}
			if p.Run == run && p.Tenant != "" && p.Tenant != ev.TenantID {
				return outcome.Permanentf("security.tenant_mismatch", "event tenant %s does not own the task", ev.TenantID)
			}
			_, err := inbox.Do(ctx, pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
				if p.Run != run {
					return inbox.StaleNoop, nil
				}
				_, err := tx.Exec(ctx, `INSERT INTO effects (event_id, seq) VALUES ($1, $2)`, ev.EventID, p.Seq)
				return inbox.Applied, err
			})
			return err
		},
	})
}

// newEvent builds an outbox event of the run on topic with tag.
func newEvent(t *testing.T, topic catalog.Topic, eventType, tag, run string, seq int) outbox.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType: eventType, Producer: "e2e", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(),
		Payload: payload{Run: run, Seq: seq},
	})
	require.NoError(t, err)
	return outbox.Event{Envelope: env, Topic: topic, Tag: tag}
}

// writeEvents commits events to the outbox in transactions of per.
func writeEvents(ctx context.Context, pool *pgxpool.Pool, events []outbox.Event, per int) error {
	for i := 0; i < len(events); i += per {
		chunk := events[i:min(i+per, len(events))]
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return outbox.Write(ctx, tx, chunk...) }); err != nil {
			return fmt.Errorf("write events %d..%d: %w", i, i+len(chunk), err)
		}
	}
	return nil
}

// effectCounts returns how many effect rows exist and how many distinct
// events they belong to.
func effectCounts(t *testing.T, pool *pgxpool.Pool) (rows, distinct int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT count(*), count(DISTINCT event_id) FROM effects`).Scan(&rows, &distinct))
	return rows, distinct
}

// waitForEffects waits until n distinct events have their effect.
func waitForEffects(t *testing.T, pool *pgxpool.Pool, n int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, distinct := effectCounts(t, pool)
		if distinct >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d events had their effect within %s", distinct, n, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// testLogger writes warnings and errors to the test's output.
func testLogger(t *testing.T, component string) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})).With(slog.String("component", component))
}

// kernel is an in-process relay and source adapter on the real proxy and a
// private database schema, for one test's own consumer group and tag.
type kernel struct {
	cfg      config.RocketMQ
	pool     *pgxpool.Pool
	run      string // this test's run id: other runs' events are stale no-ops
	tag      string
	topic    catalog.Topic
	group    catalog.Group
	producer *rocketmq.Producer
	// wrap, when set, stands between the source and its consumer.
	wrap func(mq.Consumer) mq.Consumer
}

// newKernel creates the group and the clients; start runs relay and source.
func newKernel(t *testing.T, maxAttempts int) *kernel {
	t.Helper()
	k := &kernel{
		cfg:   rocketmqtest.Config(t),
		pool:  dbtest.TestSchema(t),
		run:   rocketmqtest.UniqueName("run"),
		tag:   rocketmqtest.UniqueName("e2e"),
		topic: catalog.BillingSettle,
	}
	createEffects(t, k.pool)
	k.group = catalog.Group{Name: rocketmqtest.UniqueName("g_e2e"), MaxDeliveryAttempts: maxAttempts,
		Subscriptions: []catalog.Subscription{{Topic: k.topic, Tags: []string{k.tag}}}}
	rocketmqtest.Apply(t, k.cfg, nil, []catalog.Group{k.group})
	producer, err := rocketmq.NewProducer(k.cfg, k.topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	k.producer = producer
	return k
}

// stage is the effect stage of this kernel's run.
func (k *kernel) stage() *stage.Function {
	return effectStage(k.pool, k.group.Name, catalog.EventSettleRequested, k.run)
}

// start runs the relay and a source delivering to d until the test ends.
func (k *kernel) start(t *testing.T, d delivery.Deliverer, rp relay.Params, sp source.Params) {
	t.Helper()
	consumer, err := rocketmq.NewConsumer(k.cfg, rocketmq.ConsumerParams{
		Group: k.group.Name, Filters: map[string]string{k.topic.BrokerName(): k.tag}, Await: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = consumer.Close() })

	rp.Pool, rp.Producer, rp.Owner = k.pool, k.producer, k.run
	rp.Logger = testLogger(t, "relay")
	var c mq.Consumer = consumer
	if k.wrap != nil {
		c = k.wrap(c)
	}
	sp.Group, sp.Consumers, sp.Deliverer, sp.Quarantine = k.group, []mq.Consumer{c}, d, k.pool
	sp.Logger = testLogger(t, "source")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Add(2)
	go func() { defer wg.Done(); _ = relay.New(rp).Run(ctx) }()
	go func() { defer wg.Done(); _ = source.New(sp).Run(ctx) }()
}

// events makes n events of this kernel's run.
func (k *kernel) events(t *testing.T, n int) []outbox.Event {
	t.Helper()
	var out []outbox.Event
	for i := range n {
		out = append(out, newEvent(t, k.topic, catalog.EventSettleRequested, k.tag, k.run, i))
	}
	return out
}
