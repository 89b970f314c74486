package api

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestHubResubscribesAfterLosingItsConnection kills the hub's pub/sub
// connection: open streams close (they would miss changes), and the hub
// subscribes again and serves new streams.
func TestHubResubscribesAfterLosingItsConnection(t *testing.T) {
	t.Parallel()
	// Idle waits time out and ping often; the subscription must survive
	// them.
	b := startHub(t, 100*time.Millisecond, nil)
	h := b.hub
	tenantID, taskID := uuid.New(), uuid.New()

	s := subscribe(t, h, tenantID)
	b.publish(t, tenantID, taskID, 1)
	require.Contains(t, receive(t, s), `"version":1`)
	ids := b.subscriptions(t)
	require.Len(t, ids, 1)
	time.Sleep(500 * time.Millisecond) // several idle timeouts and pings
	b.publish(t, tenantID, taskID, 2)
	require.Contains(t, receive(t, s), `"version":2`)
	require.Equal(t, ids, b.subscriptions(t), "idle pings keep the connection")

	// Only this hub's connection: CLIENT KILL TYPE pubsub alone would end
	// the subscriptions of every test sharing the server.
	killed, err := b.admin.Do(t.Context(), "CLIENT", "KILL", "ID", ids[0], "TYPE", "pubsub").Int()
	require.NoError(t, err)
	require.Equal(t, 1, killed)
	requireClosed(t, s, closedListenerLost)

	b.waitSubscribed(t)
	s = subscribe(t, h, tenantID)
	require.NotContains(t, b.subscriptions(t), ids[0])
	b.publish(t, tenantID, taskID, 3)
	f := receive(t, s)
	require.True(t, strings.HasPrefix(f, "id: "+taskID.String()+":3\n"), f)
	require.Contains(t, f, "event: task.state.changed\n")
	require.Contains(t, f, `"version":3`)
}

// TestHubNoticesASilentlyDeadConnection freezes the hub's connection, as a
// network that drops packets without a reset would: nothing fails on its
// own, so only the hub's ping can tell. It must close the streams and
// subscribe again on a new connection.
func TestHubNoticesASilentlyDeadConnection(t *testing.T) {
	t.Parallel()
	var link freezer
	b := startHub(t, 100*time.Millisecond, func(o *redis.Options) { o.Dialer = link.dial })
	h := b.hub
	tenantID, taskID := uuid.New(), uuid.New()
	s := subscribe(t, h, tenantID)
	b.publish(t, tenantID, taskID, 1)
	require.Contains(t, receive(t, s), `"version":1`)

	frozeAt := time.Now()
	link.freeze()
	b.publish(t, tenantID, taskID, 2) // lost, like anything sent now
	requireClosed(t, s, closedListenerLost)
	require.Less(t, time.Since(frozeAt), 2*time.Second, "noticed within two checks, give or take")

	b.waitSubscribed(t)
	s = subscribe(t, h, tenantID)
	b.publish(t, tenantID, taskID, 3)
	require.Contains(t, receive(t, s), `"version":3`)
}

// freezer dials real connections it can freeze: from then on they accept
// writes and deliver nothing, until closed.
type freezer struct {
	mu    sync.Mutex
	conns []*freezableConn
}

func (f *freezer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	fc := &freezableConn{Conn: c}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.conns = append(f.conns, fc)
	return fc, nil
}

// freeze freezes every connection dialled so far; later ones work.
func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.frozen.Store(true)
	}
}

type freezableConn struct {
	net.Conn
	frozen atomic.Bool
}

// Read discards what arrives while frozen; read deadlines still apply.
func (c *freezableConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.frozen.Load() {
			return n, err
		}
	}
}

// Write swallows what is sent while frozen.
func (c *freezableConn) Write(p []byte) (int, error) {
	if c.frozen.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}
