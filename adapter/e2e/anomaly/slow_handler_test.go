package anomaly_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/source"
)

// TestAnomalyHandlerSlowerThanInvisibleTime: the row "handler slower than
// the invisible time", on the emulator.
func TestAnomalyHandlerSlowerThanInvisibleTime(t *testing.T) {
	t.Parallel()
	k := newEmulator(t, "slow", 16)
	handlerSlowerThanInvisibleTime(t, k, 10)
}

// handlerSlowerThanInvisibleTime runs events whose first delivery stalls
// for twice the invisible duration (a paused process, a provider call or a
// lock wait that outlives it), some before the inbox transaction and some
// inside it, among normal events. The broker hands each stalled message out
// again while its first delivery still runs. Whichever delivery commits
// first applies the effect; every other one finds the inbox row, after
// waiting on it when the first holds it, and is a duplicate. Each event's
// effect happens exactly once, no message is left unsettled or
// dead-lettered, and the normal events around them are delivered once.
func handlerSlowerThanInvisibleTime(t *testing.T, k *kernel, normal int) {
	obs := newObserver()
	fn := &effectStage{k: k, label: "a", stall: 2 * k.invisible, obs: obs}
	// The handler timeout is above the invisible duration on purpose: that
	// is the anomaly. (SOURCE_HANDLER_TIMEOUT must be below SOURCE_INVISIBLE
	// in a deployment; a process that stops running ignores it anyway.)
	c, _ := k.consumer(t)
	k.startSource(t, c, fn.function(), func(p *source.Params) {
		p.Workers = 8
		p.HandlerTimeout = 4 * k.invisible
	})
	k.startRelay(t, k.producer, k.run)

	slow := slices.Concat(k.events(t, 0, 2, kindSlowBefore), k.events(t, 2, 2, kindSlowInside))
	first := slices.Concat(slow, k.events(t, len(slow), normal, kindNormal))
	second := k.events(t, len(first), normal, kindNormal)
	k.write(t, first)
	// More traffic while the slow ones stall and come back.
	require.Eventually(t, func() bool { return obs.of(slow[0].Envelope.EventID).overlapped }, 2*k.invisible+2*k.lag+10*time.Second, 10*time.Millisecond)
	k.write(t, second)
	all := slices.Concat(first, second)

	k.waitForEffects(t, ids(all), time.Minute+4*k.invisible)
	// Give any further redelivery time to arrive and show up as an effect.
	time.Sleep(k.invisible + k.lag)
	k.requireExactlyOnce(t, ids(all))

	for _, e := range slow {
		id, s := e.Envelope.EventID, obs.of(e.Envelope.EventID)
		t.Logf("stalled event %s: %d deliveries, %d found the inbox row", id, s.deliveries, s.duplicates)
		require.GreaterOrEqual(t, s.deliveries, 2, "event %s was redelivered while it stalled", id)
		require.True(t, s.overlapped, "event %s: the redelivery ran while the first delivery still ran", id)
		require.Equal(t, s.deliveries-1, s.duplicates, "event %s: every delivery but one found the inbox row", id)
	}
	for _, id := range ids(all[len(slow):]) {
		require.Equal(t, 1, obs.of(id).deliveries, "normal event %s was delivered once", id)
	}
	require.Empty(t, k.quarantine(t), "nothing was dead-lettered or quarantined")
}
