//go:build !race

package e2e_test

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/relay"
	"github.com/aivedio/pipeline/adapter/source"
)

// TestProxyRestart restarts the RocketMQ proxy (and its embedded broker)
// while events flow: the relay and the source adapter recover by themselves
// and every event still has exactly one effect.
//
// It stops the broker every other test uses, so it is not a TestRealBroker*
// test: `make test` runs it alone, after the others (local/services/test.sh).
func TestProxyRestart(t *testing.T) {
	ctx := context.Background()
	k := newKernel(t, 16)
	pool := k.pool
	k.start(t, source.HandlerFunc(k.stage().Handle),
		relay.Params{Poll: 200 * time.Millisecond, BackoffBase: 500 * time.Millisecond, BackoffMax: 5 * time.Second},
		source.Params{Workers: 8, Invisible: 20 * time.Second, HandlerTimeout: 10 * time.Second,
			RetryDelay: func(int) time.Duration { return 2 * time.Second }})

	const n = 400
	events := k.events(t, n)
	writeDone := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += 20 {
			if err := writeEvents(ctx, pool, events[i:i+20], 20); err != nil {
				writeDone <- err
				return
			}
			time.Sleep(150 * time.Millisecond)
		}
		writeDone <- nil
	}()

	time.Sleep(time.Second)
	out, err := exec.Command("../../local/services/services.sh", "restart-proxy").CombinedOutput()
	require.NoError(t, err, "restart the proxy: %s", out)
	require.NoError(t, <-writeDone)

	t.Cleanup(func() {
		var pending, attempts int
		_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), coalesce(sum(publish_attempts),0) FROM outbox_events`).Scan(&pending, &attempts)
		t.Logf("outbox: %d unpublished, %d failed publishes", pending, attempts)
	})
	waitForEffects(t, pool, n, 3*time.Minute)
	time.Sleep(5 * time.Second) // late redeliveries show up as duplicates, if any
	rows, distinct := effectCounts(t, pool)
	require.Equal(t, n, distinct, "no event lost across the restart")
	require.Equal(t, n, rows, "no event applied twice")
}
