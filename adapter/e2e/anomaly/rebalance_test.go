package anomaly_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/source"
)

// TestAnomalyConsumerRebalance: the row "consumer rebalance", on the
// emulator.
func TestAnomalyConsumerRebalance(t *testing.T) {
	t.Parallel()
	k := newEmulator(t, "rebalance", 16)
	consumerRebalance(t, k, 400, 20*time.Millisecond)
}

// consumerRebalance changes the members of one consumer group while a
// backlog of n events flows through it, each delivery working for busy.
// Adapters a and b share the stream. a stops while it has deliveries in
// flight and abandons them without an ACK, as a pod killed at the end of
// its grace period does. c joins. b leaves gracefully, finishing and ACKing
// what it holds. c alone takes the rest, and a's abandoned messages once
// their invisible duration ends. Every event has its effect exactly once,
// and every member applied some.
func consumerRebalance(t *testing.T, k *kernel, n int, busy time.Duration) {
	obs := newObserver()
	type member struct {
		stage       *effectStage
		log         *deliveryLog
		stop, leave func()
	}
	join := func(label string, drain time.Duration) member {
		c, leave := k.consumer(t)
		fn := &effectStage{k: k, label: label, busy: busy, obs: obs}
		log := &deliveryLog{next: fn.function()}
		stop := k.startSource(t, c, log, func(p *source.Params) { p.DrainTimeout = drain })
		return member{stage: fn, log: log, stop: stop, leave: leave}
	}
	applied := func() int {
		got := 0
		for _, c := range k.effects(t) {
			got += c
		}
		return got
	}

	a, b := join("a", time.Millisecond), join("b", time.Minute)
	k.startRelay(t, k.producer, k.run)
	events := k.events(t, 0, n, kindNormal)
	k.write(t, events)

	// a goes away mid-delivery: once a quarter is applied, what a receives
	// stays in its handler, and a stops with at least one delivery held.
	require.Eventually(t, func() bool { return applied() >= n/4 }, time.Minute, time.Millisecond)
	a.stage.hold.Store(true)
	require.Eventually(t, func() bool { return a.stage.held.Load() > 0 }, time.Minute, time.Millisecond)
	a.stop()
	a.leave()
	_, abandoned := a.log.counts()
	require.Positive(t, abandoned, "a stopped with deliveries in flight")
	t.Logf("a left with %d deliveries abandoned, after %d of %d effects", abandoned, applied(), n)

	c := join("c", time.Minute)
	// b leaves the way a deployment's rolling update lets it.
	require.Eventually(t, func() bool { return applied() >= n/2 }, time.Minute, time.Millisecond)
	b.stop()
	b.leave()
	_, bAbandoned := b.log.counts()
	require.Zero(t, bAbandoned, "a graceful stop finishes what it holds")

	k.waitForEffects(t, ids(events), time.Minute+2*(k.invisible+k.lag))
	time.Sleep(k.invisible + k.lag) // late redeliveries would show as second effects
	c.stop()
	k.requireExactlyOnce(t, ids(events))
	require.Empty(t, k.quarantine(t))

	redelivered := 0
	for _, id := range ids(events) {
		redelivered += obs.of(id).deliveries - 1
	}
	require.GreaterOrEqual(t, redelivered, abandoned, "a's abandoned messages came back to another member")
	by := map[string]int{}
	rows, err := k.pool.Query(context.Background(), `SELECT applied_by, count(*) FROM effects GROUP BY applied_by`)
	require.NoError(t, err)
	for rows.Next() {
		var label string
		var count int
		require.NoError(t, rows.Scan(&label, &count))
		by[label] = count
	}
	require.NoError(t, rows.Err())
	t.Logf("effects by member: %v; %d redeliveries", by, redelivered)
	for _, m := range []string{"a", "b", "c"} {
		require.Positive(t, by[m], "member %s applied some events", m)
	}
}
