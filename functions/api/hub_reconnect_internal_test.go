package api

import (
	"bytes"
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
	var link freezer
	b := startHub(t, 100*time.Millisecond, func(o *redis.Options) { o.Dialer = link.dial })
	h := b.hub
	tenantID, taskID := uuid.New(), uuid.New()

	s := subscribe(t, h, tenantID)
	b.publish(t, tenantID, taskID, 1)
	require.Contains(t, receive(t, s), `"version":1`)
	ids := b.subscriptions(t)
	require.Len(t, ids, 1)
	// Several idle timeouts and pings, each ping answered before the
	// change below (one connection, in order).
	pings := link.pings.Load()
	require.Eventually(t, func() bool { return link.pings.Load() >= pings+3 }, 10*time.Second, 10*time.Millisecond,
		"the idle hub does not ping")
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

	link.freeze()
	b.publish(t, tenantID, taskID, 2) // lost, like anything sent now
	requireClosed(t, s, closedListenerLost)
	// Within two checks: one quiet check sends a ping, the next one
	// without an answer ends the connection. Counted rather than timed:
	// a hub that pinged again would still be quick with checks this short.
	require.Equal(t, int64(1), link.unanswered(), "the hub gives up after one unanswered ping")

	b.waitSubscribed(t)
	s = subscribe(t, h, tenantID)
	b.publish(t, tenantID, taskID, 3)
	require.Contains(t, receive(t, s), `"version":3`)
}

// freezer dials real connections it can freeze: from then on they accept
// writes and deliver nothing, until closed. It counts the pings written
// through them.
type freezer struct {
	mu    sync.Mutex
	conns []*freezableConn
	pings atomic.Int64
}

func (f *freezer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	fc := &freezableConn{Conn: c, link: f}
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

// unanswered is how many pings the frozen connections sent after the last
// thing Redis delivered on them: the pings the hub waited out.
func (f *freezer) unanswered() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var n int64
	for _, c := range f.conns {
		if c.frozen.Load() {
			n += c.unanswered.Load()
		}
	}
	return n
}

type freezableConn struct {
	net.Conn
	link   *freezer
	frozen atomic.Bool
	// unanswered counts the pings written since a read last delivered
	// something: a ping whose answer a freeze swallowed stays counted.
	unanswered atomic.Int64
}

// Read discards what arrives while frozen; read deadlines still apply.
func (c *freezableConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil || !c.frozen.Load() {
			if n > 0 {
				c.unanswered.Store(0)
			}
			return n, err
		}
	}
}

// Write swallows what is sent while frozen.
func (c *freezableConn) Write(p []byte) (int, error) {
	// go-redis writes each command whole, as a RESP array of bulk
	// strings: PING alone is *1 $4 ping.
	ping := bytes.EqualFold(p, []byte("*1\r\n$4\r\nping\r\n"))
	if ping {
		c.link.pings.Add(1)
		c.unanswered.Add(1)
	}
	if c.frozen.Load() {
		return len(p), nil
	}
	return c.Conn.Write(p)
}
