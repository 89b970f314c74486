//go:build !race

package e2e_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// diesBeforeAck is a deliverer that, on the first delivery of some events,
// lets the stage commit and then fails as an adapter killed before its ACK
// would: the broker redelivers an event whose effect already happened.
type diesBeforeAck struct {
	next  delivery.Deliverer
	every int
	rng   *rand.Rand // under mu

	mu       sync.Mutex
	seen     map[string]int
	injected map[string]bool // events whose first delivery committed and lost its ACK
}

func (d *diesBeforeAck) Deliver(ctx context.Context, ev event.Event) error {
	d.mu.Lock()
	d.seen[ev.ID()]++
	lose := d.seen[ev.ID()] == 1 && d.rng.IntN(d.every) == 0
	d.mu.Unlock()
	err := d.next.Deliver(ctx, ev)
	if err == nil && lose {
		d.mu.Lock()
		d.injected[ev.ID()] = true
		d.mu.Unlock()
		return errors.New("adapter died after the commit, before the ACK")
	}
	return err
}

func (d *diesBeforeAck) deliveries(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[id]
}

// injectedIDs returns the events whose ACK was lost so far.
func (d *diesBeforeAck) injectedIDs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	ids := make([]string, 0, len(d.injected))
	for id := range d.injected {
		ids = append(ids, id)
	}
	return ids
}

// notRedelivered returns how many of ids were delivered fewer than twice.
func (d *diesBeforeAck) notRedelivered(ids []string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	missing := 0
	for _, id := range ids {
		if d.seen[id] < 2 {
			missing++
		}
	}
	return missing
}

// TestRealBrokerExactlyOnceUnderFaults runs 300 events through relay, the
// real proxy and the source adapter into an inbox-protected stage, while
// some commits lose their ACK and some publishes lose their published mark.
// Poison arrives too. Every event has exactly one effect; poison is
// quarantined once and never retried.
func TestRealBrokerExactlyOnceUnderFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := newKernel(t, 5)
	pool, run, tag, topic, group, producer := k.pool, k.run, k.tag, k.topic, k.group, k.producer
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	deliver := &diesBeforeAck{next: delivery.Func(k.stage().Handle), every: 7,
		rng: rand.New(rand.NewPCG(uint64(seed), 0)), seen: map[string]int{}, injected: map[string]bool{}}
	k.start(t, deliver, relay.Params{Poll: 100 * time.Millisecond}, source.Params{
		Workers: 16, Invisible: 20 * time.Second, HandlerTimeout: 10 * time.Second,
		RetryDelay: func(int) time.Duration { return time.Second }})

	const n = 300
	require.NoError(t, writeEvents(ctx, pool, k.events(t, n), 25))

	// The relay loses some published marks, as a relay killed between send
	// and mark would: those rows are published again with the same ids.
	require.Eventually(t, func() bool {
		var published int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at IS NOT NULL`).Scan(&published))
		return published == n
	}, time.Minute, 50*time.Millisecond)
	var republished []string
	lost, err := pool.Query(ctx, `UPDATE outbox_events SET published_at = NULL WHERE event_id IN (SELECT event_id FROM outbox_events ORDER BY random() LIMIT 30) RETURNING event_id::text`)
	require.NoError(t, err)
	for lost.Next() {
		var id string
		require.NoError(t, lost.Scan(&id))
		republished = append(republished, id)
	}
	require.NoError(t, lost.Err())
	require.Len(t, republished, 30)

	// Poison: not a CloudEvent, an unknown schema version, a tenant mismatch.
	send := func(m *mq.Message) {
		m.Topic, m.Tag = topic.BrokerName(), tag
		_, err := producer.Send(ctx, m)
		require.NoError(t, err)
	}
	send(&mq.Message{Keys: []string{"garbage"}, Body: []byte("{not json")})
	future := newEvent(t, topic, catalog.EventSettleRequested, tag, run, -1)
	futureCE, err := future.Envelope.ToCloudEvent()
	require.NoError(t, err)
	futureCE.SetExtension("schemaversion", 99)
	var futureMsg mq.Message
	require.NoError(t, cerocketmq.WriteMessage(cerocketmq.WithTag(ctx, tag), binding.ToMessage(&futureCE), &futureMsg))
	send(&futureMsg)
	mismatch := newEvent(t, topic, catalog.EventSettleRequested, tag, run, -2)
	mismatch.Envelope.Payload = []byte(`{"run":"` + run + `","seq":-2,"tenant":"00000000-0000-4000-8000-000000000001"}`)
	require.NoError(t, writeEvents(ctx, pool, []outbox.Event{mismatch}, 1))

	waitForEffects(t, pool, n, 2*time.Minute)
	require.Eventually(t, func() bool {
		count, err := quarantine.Count(ctx, pool, group.Name)
		require.NoError(t, err)
		return count == 3
	}, time.Minute, 100*time.Millisecond)
	// The faults ran their path only once every event whose ACK was lost
	// came back, and every row whose mark was lost went out again and came
	// back: until then a missing inbox would not yet show.
	var injected []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		injected = deliver.injectedIDs()
		var unpublished int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`).Scan(&unpublished))
		ackLost, markLost := deliver.notRedelivered(injected), deliver.notRedelivered(republished)
		if unpublished == 0 && ackLost == 0 && markLost == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m: %d outbox rows unpublished; %d of %d events whose ACK was lost and %d of %d rows whose mark was lost not delivered again",
				unpublished, ackLost, len(injected), markLost, len(republished))
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NotEmpty(t, injected, "the fault was injected")
	t.Logf("%d ACKs and %d published marks lost, every one delivered again", len(injected), len(republished))
	rows, distinct := effectCounts(t, pool)
	require.Equal(t, n, distinct, "every event had its effect")
	require.Equal(t, n, rows, "no event had two")
	require.Equal(t, 1, deliver.deliveries(mismatch.Envelope.EventID), "a permanent failure is not retried")
	var codes []string
	rowsQ, err := pool.Query(ctx, `SELECT error_code FROM message_quarantine ORDER BY error_code`)
	require.NoError(t, err)
	for rowsQ.Next() {
		var c string
		require.NoError(t, rowsQ.Scan(&c))
		codes = append(codes, c)
	}
	require.Equal(t, []string{"envelope.unsupported_schema", "not_cloudevent", "security.tenant_mismatch"}, codes)
}
