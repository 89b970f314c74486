package relay_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
)

// sentThenStuck is a producer that sends and then never returns, as a
// relay whose process dies between the send and the mark: the broker has
// the message, the row stays unpublished under the dead relay's lease.
type sentThenStuck struct {
	mq.Producer
	sent    chan string // each sent event's id
	release chan struct{}
}

func (p *sentThenStuck) Send(ctx context.Context, msg *mq.Message) (string, error) {
	id, err := p.Producer.Send(ctx, msg)
	if err != nil {
		return id, err
	}
	p.sent <- msg.Keys[0]
	<-p.release
	return "", context.Canceled // what a dead process answers: nothing recorded
}

// TestALostMarkIsPublishedAgainAfterTheLease: a relay that sent its rows
// but never marked them keeps them leased: no other relay publishes them
// while the lease is live, and once it ran out (RELAY_LEASE) another relay
// publishes each again, with the same event id, for the consumers' inbox
// to absorb. Nothing is lost; the duplicate is the price.
func TestALostMarkIsPublishedAgainAfterTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	const lease = time.Second
	stuck := &sentThenStuck{Producer: b.broker.Producer(), sent: make(chan string, 8), release: make(chan struct{})}
	dying := relay.New(relay.Params{Pool: b.pool, Producer: stuck, Owner: "dying", Batch: 8, Publishers: 1, Lease: lease})
	var written []outbox.Event
	for range 3 {
		e := event(t, catalog.GenerationSubmit, "lost-mark", "", time.Time{})
		written = append(written, e)
		b.write(t, e)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stuck.release); wg.Wait() })
	wg.Go(func() { _, _ = dying.RunOnce(ctx) })
	first := <-stuck.sent // one row sent, its mark never to come; the others stay claimed

	other := relay.New(relay.Params{Pool: b.pool, Producer: b.broker.Producer(), Owner: "other", Batch: 8, Lease: lease})
	n, err := other.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the dying relay's lease is live: nobody else claims its rows")

	require.Eventually(t, func() bool {
		var live bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT bool_or(lease_until >= now()) FROM outbox_events WHERE published_at IS NULL`).Scan(&live))
		return !live
	}, 10*lease, 10*time.Millisecond, "the lease runs out")
	n, err = other.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, len(written), n, "once the lease ran out another relay claims every row")
	pending, _, err := outbox.Pending(ctx, b.pool)
	require.NoError(t, err)
	require.Zero(t, pending)

	ids := map[string]int{}
	for _, m := range b.receiveAll(t, "g_test", catalog.GenerationSubmit) {
		ids[m.Keys[0]]++
	}
	for _, e := range written {
		want := 1
		if e.Envelope.EventID == first {
			want = 2 // sent by the dying relay, and again
		}
		require.Equal(t, want, ids[e.Envelope.EventID], "event %s", e.Envelope.EventID)
	}
}
