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
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// diesBeforeAck is a deliverer that, on the first delivery of some events,
// lets the stage commit and then fails as an adapter killed before its ACK
// would: the broker redelivers an event whose effect already happened.
type diesBeforeAck struct {
	next  source.Deliverer
	every int

	mu       sync.Mutex
	seen     map[string]int
	injected int
}

func (d *diesBeforeAck) Deliver(ctx context.Context, ev event.Event) error {
	d.mu.Lock()
	d.seen[ev.ID()]++
	first := d.seen[ev.ID()] == 1
	d.mu.Unlock()
	err := d.next.Deliver(ctx, ev)
	if err == nil && first && rand.IntN(d.every) == 0 {
		d.mu.Lock()
		d.injected++
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
	deliver := &diesBeforeAck{next: source.HandlerFunc(k.stage().Handle), every: 7, seen: map[string]int{}}
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
	lost, err := pool.Exec(ctx, `UPDATE outbox_events SET published_at = NULL WHERE event_id IN (SELECT event_id FROM outbox_events ORDER BY random() LIMIT 30)`)
	require.NoError(t, err)
	require.EqualValues(t, 30, lost.RowsAffected())

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
	// Let the redeliveries of the lost ACKs and marks arrive and be absorbed.
	require.Eventually(t, func() bool {
		var dups int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM inbox_dedup WHERE consumer_name = $1`, group.Name).Scan(&dups))
		return dups >= n
	}, time.Minute, 100*time.Millisecond)
	time.Sleep(3 * time.Second)

	rows, distinct := effectCounts(t, pool)
	require.Equal(t, n, distinct, "every event had its effect")
	require.Equal(t, n, rows, "no event had two")
	require.Positive(t, deliver.injected, "the fault was injected")
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
