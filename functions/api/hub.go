package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/task"
)

const (
	// streamBuffer is how many events a stream may fall behind before the
	// hub closes it rather than wait for it.
	streamBuffer = 64
	// maxStreamsPerTenant bounds the streams one tenant holds open.
	maxStreamsPerTenant = 32
	// listenCheck is how long the listener waits for a notification before
	// it pings the database, so a silently dead connection is noticed.
	listenCheck = 30 * time.Second
	// connectTimeout bounds connecting and LISTEN; pingTimeout one ping.
	connectTimeout = 10 * time.Second
	pingTimeout    = 5 * time.Second
)

// Reasons the hub closes a stream, also the label of
// api_event_streams_closed_total.
const (
	closedTooSlow      = "too_slow"
	closedListenerLost = "listener_lost"
	closedShutdown     = "shutdown"
)

var (
	errNotListening   = errors.New("event listener not connected")
	errTooManyStreams = errors.New("too many event streams for the tenant")
)

// hub holds the one LISTEN connection on task.NotifyChannel and fans its
// notifications out to the streams of each tenant.
//
// Notifications arrive in commit order (PostgreSQL delivers those of
// different transactions in the order they committed) and the hub hands
// each to every stream of its tenant before reading the next, so every
// stream sees its tenant's changes in commit order. It never waits for a
// stream: one whose buffer is full is closed. A stream is also closed when
// the listener loses its connection, because notifications sent while it
// reconnects are lost; a stream that stays open has missed nothing since it
// opened.
type hub struct {
	pool    *pgxpool.Pool
	log     *slog.Logger
	metrics *metrics
	check   time.Duration // listenCheck; shorter in tests

	// backendPID is the listening connection's server process, 0 when
	// not connected: what an operator looks for in pg_stat_activity.
	backendPID atomic.Uint32

	mu        sync.Mutex
	subs      map[uuid.UUID]map[*subscriber]struct{}
	listening bool
	up        chan struct{} // closed while listening
}

// subscriber is one open stream. The hub sends it ready-made SSE frames
// and closes ch when it drops the stream, after setting reason.
type subscriber struct {
	tenantID uuid.UUID
	ch       chan []byte
	reason   string
}

func newHub(pool *pgxpool.Pool, log *slog.Logger, m *metrics) *hub {
	return &hub{pool: pool, log: log, metrics: m, check: listenCheck, subs: map[uuid.UUID]map[*subscriber]struct{}{}, up: make(chan struct{})}
}

// subscribe opens a stream for the tenant, waiting until ctx ends for the
// listener to be connected.
func (h *hub) subscribe(ctx context.Context, tenantID uuid.UUID) (*subscriber, error) {
	h.mu.Lock()
	up := h.up
	h.mu.Unlock()
	select {
	case <-up:
	case <-ctx.Done():
		return nil, errNotListening
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.listening {
		return nil, errNotListening
	}
	subs := h.subs[tenantID]
	if len(subs) >= maxStreamsPerTenant {
		return nil, errTooManyStreams
	}
	if subs == nil {
		subs = map[*subscriber]struct{}{}
		h.subs[tenantID] = subs
	}
	s := &subscriber{tenantID: tenantID, ch: make(chan []byte, streamBuffer)}
	subs[s] = struct{}{}
	h.metrics.streamOpened()
	return s, nil
}

// unsubscribe ends a stream the client closed; a stream the hub dropped
// is gone already.
func (h *hub) unsubscribe(s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s.tenantID][s]; ok {
		h.remove(s)
		close(s.ch)
	}
}

// dispatch hands frame to every stream of the tenant, dropping those that
// are full.
func (h *hub) dispatch(tenantID uuid.UUID, frame []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[tenantID] {
		select {
		case s.ch <- frame:
		default:
			h.drop(s, closedTooSlow)
		}
	}
}

// drop closes a stream for reason; h.mu is held.
func (h *hub) drop(s *subscriber, reason string) {
	h.remove(s)
	s.reason = reason
	close(s.ch)
	h.metrics.streamClosed(reason)
}

// remove forgets a stream; h.mu is held.
func (h *hub) remove(s *subscriber) {
	delete(h.subs[s.tenantID], s)
	if len(h.subs[s.tenantID]) == 0 {
		delete(h.subs, s.tenantID)
	}
	h.metrics.streamEnded()
}

// setListening records whether notifications are flowing. Going down
// drops every stream with reason: from now on they would miss changes.
func (h *hub) setListening(on bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		if !h.listening {
			h.listening = true
			close(h.up)
		}
		return
	}
	if h.listening {
		h.listening = false
		h.up = make(chan struct{})
	}
	for _, subs := range h.subs {
		for s := range subs {
			h.drop(s, reason)
		}
	}
}

// run listens until ctx ends, reconnecting with exponential backoff.
func (h *hub) run(ctx context.Context) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 30 * time.Second
	defer h.setListening(false, closedShutdown)
	for {
		connected, err := h.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		h.setListening(false, closedListenerLost)
		h.metrics.listenFailed()
		if connected {
			b.Reset()
		}
		wait := b.NextBackOff()
		h.log.WarnContext(ctx, "event listener failed; open streams were closed, reconnecting",
			slog.String("error", err.Error()), slog.Duration("retry_in", wait))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// listen holds one connection until it fails or ctx ends. connected
// reports whether it got as far as LISTEN.
func (h *hub) listen(ctx context.Context) (connected bool, err error) {
	cfg := h.pool.Config().ConnConfig.Copy()
	// On a timeout, a deadline on the socket rather than a cancel request:
	// the periodic wait below times out on purpose, and the connection
	// must survive it.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pingTimeout)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(cctx, "LISTEN "+pgx.Identifier{task.NotifyChannel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen on %s: %w", task.NotifyChannel, err)
	}
	h.backendPID.Store(conn.PgConn().PID())
	defer h.backendPID.Store(0)
	h.setListening(true, "")
	h.log.InfoContext(ctx, "event listener connected", slog.String("channel", task.NotifyChannel),
		slog.Uint64("backend_pid", uint64(conn.PgConn().PID())))
	for {
		wctx, cancel := context.WithTimeout(ctx, h.check)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			h.deliver(ctx, n.Payload)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case pgconn.Timeout(err):
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
		default:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// deliver turns one notification into an SSE frame for its tenant.
func (h *hub) deliver(ctx context.Context, payload string) {
	var change task.StateChanged
	if err := json.Unmarshal([]byte(payload), &change); err != nil || change.TenantID == uuid.Nil || change.TaskID == uuid.Nil {
		h.log.WarnContext(ctx, "ignoring a malformed state-change notification", slog.Int("bytes", len(payload)))
		return
	}
	data, err := json.Marshal(change)
	if err != nil {
		h.log.WarnContext(ctx, "ignoring a state change that does not encode", slog.String("task_id", change.TaskID.String()))
		return
	}
	h.dispatch(change.TenantID, frame(change, data))
}

// frame is the server-sent event of one change. Its id is
// <task_id>:<version>: unique, and it names the change without a lookup
// (task_events.event_seq is not in the notification, and being assigned at
// insert rather than commit it would not be ordered either).
func frame(change task.StateChanged, data []byte) []byte {
	return fmt.Appendf(nil, "id: %s:%d\nevent: %s\ndata: %s\n\n", change.TaskID, change.Version, catalog.EventTaskStateChanged, data)
}
