package anomaly_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// TestAnomalyPoisonRetryStorm: the row "poison retry storm", on the
// emulator.
func TestAnomalyPoisonRetryStorm(t *testing.T) {
	t.Parallel()
	k := newEmulator(t, "storm", 4)
	// The good events must not be retried at all, so their handler gets
	// more than the emulator's 450 ms: under -race on a loaded machine a
	// good event's inbox transaction once waited longer for its connection
	// and was retried, which says nothing about the storm. Poison messages
	// are paced by the retry delay, not by this.
	k.invisible = 3 * time.Second
	// A retry delay of 5 s keeps the storm going for about 15 s after the
	// late good events are written. Shorter storms measured the machine,
	// not starvation: under the -race pass of `make test` on 2 cores the
	// 200 good events once took 14.8 s, beside a storm of 8.6 s (2 s
	// retries), and 343 ms more than a storm of 1 s retries. A storm that
	// starved them would hold them for its whole length, however long.
	poisonRetryStorm(t, k, 40, 200, 5*time.Second)
}

// poisonRetryStorm sends poison events, which fail retryably on every
// delivery (a dependency that never comes back), together with good events,
// and more good events once the storm is under way. Each poison message is
// delivered exactly the group's maximum delivery attempts, backing off by
// retry between them; the broker then moves it to the dead-letter topic and
// the drainer records it in message_quarantine, once, as a dead letter of
// the group. Meanwhile the good events keep flowing: each is delivered once
// and has its effect once, all of them before the storm is over.
func poisonRetryStorm(t *testing.T, k *kernel, poison, good int, retry time.Duration) {
	obs := newObserver()
	fn := &effectStage{k: k, label: "a", obs: obs}
	c, _ := k.consumer(t)
	k.startSource(t, c, fn.function(), func(p *source.Params) {
		p.RetryDelay = func(int) time.Duration { return retry }
	})
	k.startRelay(t, k.producer, k.run)
	k.startDrainer(t)

	start := time.Now()
	storm := k.events(t, 0, poison, kindPoison)
	early := k.events(t, poison, good/2, kindNormal)
	late := k.events(t, poison+good/2, good-good/2, kindNormal)
	k.write(t, slices.Concat(storm, early))
	// The rest once every poison message has failed at least once.
	require.Eventually(t, func() bool {
		for _, id := range ids(storm) {
			if obs.of(id).deliveries == 0 {
				return false
			}
		}
		return true
	}, time.Minute, 10*time.Millisecond)
	k.write(t, late)

	goods := ids(slices.Concat(early, late))
	k.waitForEffects(t, goods, time.Minute)
	doneGood := time.Now()
	require.Eventually(t, func() bool { return len(k.quarantine(t)) == poison }, 2*time.Minute+time.Duration(k.group.MaxDeliveryAttempts)*(retry+k.lag), 50*time.Millisecond,
		"every poison message reaches message_quarantine")
	k.requireExactlyOnce(t, goods)

	// The storm did not starve the good events: none was retried, and all
	// had their effect before the last poison delivery ended.
	var stormOver time.Time
	for _, id := range ids(storm) {
		if f := obs.of(id).finished; f.After(stormOver) {
			stormOver = f
		}
	}
	t.Logf("good events done %s after the start, the storm over %s after", doneGood.Sub(start).Round(time.Millisecond), stormOver.Sub(start).Round(time.Millisecond))
	require.True(t, doneGood.Before(stormOver), "good events done at %s, storm over at %s", doneGood.Format(time.StampMilli), stormOver.Format(time.StampMilli))
	for _, id := range goods {
		require.Equal(t, 1, obs.of(id).deliveries, "good event %s delivered once", id)
	}

	rows := k.quarantine(t)
	for _, id := range ids(storm) {
		require.Equal(t, k.group.MaxDeliveryAttempts, obs.of(id).deliveries, "poison %s is delivered up to the group's maximum, no more", id)
		q, ok := rows[id]
		require.True(t, ok, "poison %s quarantined", id)
		require.Equal(t, string(quarantine.SourceDLQ), q.source)
		require.Equal(t, dlq.ErrorClass, q.errorClass)
		require.Equal(t, dlq.ErrorCode, q.errorCode)
		require.GreaterOrEqual(t, q.attempt, k.group.MaxDeliveryAttempts)
	}
}
