package anomaly_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
)

// hungProducer never gets a message to the broker: its sends wait until
// they are canceled, as those of a relay process that died (or froze)
// right after its claim would.
type hungProducer struct{}

func (hungProducer) Send(ctx context.Context, _ *mq.Message) (string, error) {
	<-ctx.Done()
	return "", ctx.Err()
}

// TestAnomalyRelayDiedBeforeSend: the row "DB committed and relay died
// before send". Committed outbox rows are claimed by a relay that never
// sends them. Nothing is lost: when its lease ends another relay publishes
// them, with their event ids, and each effect happens once. When the first
// relay comes back and its sends fail, it records nothing on rows it no
// longer holds.
func TestAnomalyRelayDiedBeforeSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := newEmulator(t, "relaydied", 16)
	obs := newObserver()
	c, _ := k.consumer(t)
	k.startSource(t, c, (&effectStage{k: k, label: "a", obs: obs}).function())
	events := k.events(t, 0, 50, kindNormal)
	k.write(t, events)

	const lease = time.Second
	dead := relay.New(relay.Params{Pool: k.pool, Producer: hungProducer{}, Owner: "dead", Batch: 64, Lease: lease,
		SendTimeout: time.Minute, Logger: testLogger(t, "dead relay")})
	deadCtx, revive := context.WithCancel(ctx)
	deadDone := make(chan error, 1)
	go func() {
		_, err := dead.RunOnce(deadCtx)
		deadDone <- err
	}()
	var deadErr error
	comeBack := sync.OnceFunc(func() { revive(); deadErr = <-deadDone })
	t.Cleanup(comeBack)
	var leaseUntil time.Time
	require.Eventually(t, func() bool {
		var held int
		require.NoError(t, k.pool.QueryRow(ctx, `SELECT count(*), coalesce(min(lease_until), now()) FROM outbox_events WHERE lease_owner = 'dead'`).Scan(&held, &leaseUntil))
		return held == len(events)
	}, 10*time.Second, 5*time.Millisecond, "the dead relay claimed every row")

	k.startRelay(t, k.producer, "alive")
	k.waitForEffects(t, ids(events), lease+30*time.Second)
	var early int
	require.NoError(t, k.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at < $1`, leaseUntil).Scan(&early))
	require.Zero(t, early, "no row was taken from the dead relay before its lease ended")

	// The dead relay comes back: its sends fail, and it has nothing left to record.
	comeBack()
	require.NoError(t, deadErr)
	var published, attempts, errored int
	require.NoError(t, k.pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE published_at IS NOT NULL), coalesce(sum(publish_attempts), 0), count(last_error_code)
		FROM outbox_events`).Scan(&published, &attempts, &errored))
	require.Equal(t, len(events), published)
	require.Zero(t, attempts, "the dead relay's late failures counted no attempt on rows published by another")
	require.Zero(t, errored)

	time.Sleep(k.invisible + k.lag)
	k.requireExactlyOnce(t, ids(events))
	for _, id := range ids(events) {
		require.Equal(t, 1, obs.of(id).deliveries, "event %s was published once: the dead relay sent nothing", id)
	}
}

// storedThenTimedOut stores a message on the broker and then reports a
// timeout, the first time it sees each message: the answer was lost on the
// way back, so the relay cannot know the broker has it.
type storedThenTimedOut struct {
	next mq.Producer

	mu   sync.Mutex
	seen map[string]bool
}

func (p *storedThenTimedOut) Send(ctx context.Context, msg *mq.Message) (string, error) {
	id, err := p.next.Send(ctx, msg)
	if err != nil {
		return id, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[msg.Keys[0]] {
		return id, nil
	}
	p.seen[msg.Keys[0]] = true
	return "", fmt.Errorf("send to %s: %w", msg.Topic, context.DeadlineExceeded)
}

// TestAnomalyBrokerGotItAndRelayTimedOut: the row "broker got it and relay
// timed out". The broker stores every message, but the relay's send times
// out. The relay records the timeout and publishes the row again after its
// backoff, with the same event id: the broker holds two copies of each
// event, the stage sees both, and the inbox makes the second a duplicate.
func TestAnomalyBrokerGotItAndRelayTimedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := newEmulator(t, "relaytimeout", 16)
	obs := newObserver()
	c, _ := k.consumer(t)
	k.startSource(t, c, (&effectStage{k: k, label: "a", obs: obs}).function())
	k.startRelay(t, &storedThenTimedOut{next: k.producer, seen: map[string]bool{}}, k.run)
	events := k.events(t, 0, 50, kindNormal)
	k.write(t, events)

	k.waitForEffects(t, ids(events), 30*time.Second)
	require.Eventually(t, func() bool {
		for _, id := range ids(events) {
			if obs.of(id).duplicates == 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "the second copy of each event reached the stage")
	time.Sleep(k.invisible + k.lag)
	k.requireExactlyOnce(t, ids(events))
	for _, id := range ids(events) {
		s := obs.of(id)
		require.Equal(t, 2, s.deliveries, "event %s: the broker had two copies", id)
		require.Equal(t, 1, s.duplicates, "event %s: the inbox absorbed the second", id)
	}

	rows, err := k.pool.Query(ctx, `SELECT publish_attempts, coalesce(last_error_code, ''), published_at IS NOT NULL FROM outbox_events`)
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var attempts int
		var code string
		var published bool
		require.NoError(t, rows.Scan(&attempts, &code, &published))
		require.Equal(t, 1, attempts, "one failed publish recorded")
		require.Equal(t, "timeout", code)
		require.True(t, published, "published on the retry")
		n++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(events), n)
}
