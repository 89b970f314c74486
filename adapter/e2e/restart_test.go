//go:build !race

package e2e_test

import (
	"context"
	"errors"
	"maps"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/shared/delivery"
)

// heldAtStop is a deliverer that, while held, commits every delivery it
// gets and then keeps its ACK waiting until the proxy process is gone:
// their effect is in, and no ACK can reach the broker any more, so the
// broker must deliver them again after the restart and the inbox absorb
// them.
type heldAtStop struct {
	next delivery.Deliverer

	mu      sync.Mutex
	seen    map[string]int
	holding chan struct{} // non-nil while held; closed to let the held go
	held    map[string]bool
}

func (d *heldAtStop) Deliver(ctx context.Context, ev event.Event) error {
	d.mu.Lock()
	d.seen[ev.ID()]++
	wait := d.holding
	d.mu.Unlock()
	if err := d.next.Deliver(ctx, ev); err != nil || wait == nil {
		return err
	}
	d.mu.Lock()
	d.held[ev.ID()] = true
	d.mu.Unlock()
	// The ACK waits past the delivery's deadline if need be: the proxy's
	// stop can take longer than that.
	select {
	case <-wait:
	case <-time.After(2 * time.Minute):
	}
	return nil
}

// hold makes every delivery from now on wait for release.
func (d *heldAtStop) hold() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.holding = make(chan struct{})
}

// release lets the held deliveries go and delivers as usual again.
func (d *heldAtStop) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	close(d.holding)
	d.holding = nil
}

// unacked returns how many held deliveries the broker never got an ACK
// for, and how many of those were not delivered again yet. A held
// delivery's ACK may still succeed, at the restarted proxy: its message
// then rightly never comes back.
func (d *heldAtStop) unacked(acks *ackWatch) (held, notBack int) {
	failed := acks.failedIDs()
	d.mu.Lock()
	defer d.mu.Unlock()
	for id := range d.held {
		if !failed[id] {
			continue
		}
		held++
		if d.seen[id] < 2 {
			notBack++
		}
	}
	return held, notBack
}

// ackWatch is a consumer that notes the events whose ACK failed.
type ackWatch struct {
	mq.Consumer

	mu     sync.Mutex
	failed map[string]bool
}

func (a *ackWatch) Ack(ctx context.Context, msg *mq.Received) error {
	err := a.Consumer.Ack(ctx, msg)
	if err != nil && len(msg.Keys) > 0 {
		a.mu.Lock()
		a.failed[msg.Keys[0]] = true // the CloudEvent id (cerocketmq)
		a.mu.Unlock()
	}
	return err
}

func (a *ackWatch) failedIDs() map[string]bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.failed)
}

// TestProxyRestart restarts the RocketMQ proxy (and its embedded broker)
// while events flow: publishes fail while it is down and the relay keeps
// them; deliveries whose ACK could not reach the stopped broker come back
// after their invisible time; and every event has exactly one effect.
//
// It stops the broker every other test uses, so it is not a TestRealBroker*
// test: `make test` runs it alone, after the others (local/services/test.sh).
func TestProxyRestart(t *testing.T) {
	ctx := context.Background()
	k := newKernel(t, 16)
	pool := k.pool
	acks := &ackWatch{failed: map[string]bool{}}
	k.wrap = func(c mq.Consumer) mq.Consumer { acks.Consumer = c; return acks }
	d := &heldAtStop{next: delivery.Func(k.stage().Handle), seen: map[string]int{}, held: map[string]bool{}}
	const invisible = 20 * time.Second
	k.start(t, d,
		relay.Params{Poll: 200 * time.Millisecond, BackoffBase: 500 * time.Millisecond, BackoffMax: 5 * time.Second},
		source.Params{Workers: 8, Invisible: invisible, HandlerTimeout: 15 * time.Second,
			RetryDelay: func(int) time.Duration { return 2 * time.Second }})

	// The writer commits events until a second after the proxy is back, so
	// that some of them are published while it is down.
	restarted := make(chan struct{})
	type result struct {
		n   int
		err error
	}
	written := make(chan result, 1)
	events := k.events(t, 2500) // 25 a second: more than 90 s of them
	go func() {
		n := 0
		var after <-chan time.Time
		for {
			if n+5 > len(events) {
				written <- result{n, errors.New("ran out of events before the proxy was back")}
				return
			}
			if err := writeEvents(ctx, pool, events[n:n+5], 5); err != nil {
				written <- result{n, err}
				return
			}
			n += 5
			select {
			case <-restarted:
				if after == nil {
					after = time.After(time.Second)
				}
			default:
			}
			select {
			case <-after:
				written <- result{n, nil}
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()

	waitForEffects(t, pool, 50, time.Minute)
	restart := exec.Command("../../local/services/services.sh", "restart-proxy")
	var out safeBuffer
	restart.Stdout, restart.Stderr = &out, &out
	d.hold()
	require.NoError(t, restart.Start())
	// Let the held ACKs go once the proxy process is gone. A closed port is
	// not enough: until the process exits, an ACK sent on a connection it
	// still has open may be served, and its message then rightly never
	// comes back.
	proxyGone := time.Now().Add(time.Minute)
	for !strings.Contains(out.String(), proxyGoneLine) {
		if time.Now().After(proxyGone) {
			t.Fatalf("the proxy process at %s was not gone a minute into its restart: %s", k.cfg.Endpoint, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if conn, err := net.DialTimeout("tcp", k.cfg.Endpoint, 200*time.Millisecond); err == nil {
		_ = conn.Close()
		t.Fatalf("something still listens at %s after the proxy process is gone", k.cfg.Endpoint)
	}
	d.release()
	require.NoError(t, restart.Wait(), "restart the proxy: %s", out.String())
	close(restarted)
	res := <-written
	require.NoError(t, res.err)

	waitForEffects(t, pool, res.n, 3*time.Minute)
	var pending, failedPublishes int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), coalesce(sum(publish_attempts), 0) FROM outbox_events`).Scan(&pending, &failedPublishes))
	require.Zero(t, pending, "every event published")
	require.Positive(t, failedPublishes, "some publishes met the stopped proxy and were kept for a later try")

	held, _ := d.unacked(acks)
	require.Positive(t, held, "some deliveries under way when the proxy stopped could not be acknowledged")
	deadline := time.Now().Add(invisible + time.Minute)
	for {
		_, notBack := d.unacked(acks)
		if notBack == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the %d deliveries that could not be acknowledged at the restart did not come back within %s", notBack, held, invisible+time.Minute)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, distinct := effectCounts(t, pool)
	t.Logf("%d events, %d failed publishes, %d deliveries held across the stop and delivered again", res.n, failedPublishes, held)
	require.Equal(t, res.n, distinct, "no event lost across the restart")
	require.Equal(t, res.n, rows, "no event applied twice")
}

// proxyGoneLine is what `services.sh restart-proxy` prints once the old
// proxy process has exited.
const proxyGoneLine = "restart-proxy: the proxy process is gone"

// safeBuffer is a bytes.Buffer the restart command may write while the
// test reads it on failure.
type safeBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
