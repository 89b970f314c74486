package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/live"
)

const (
	// streamBuffer is how many events a stream may fall behind before the
	// hub closes it rather than wait for it.
	streamBuffer = 64
	// maxStreamsPerTenant bounds the streams one tenant holds open.
	maxStreamsPerTenant = 32
	// receiveCheck is how long the hub waits for a message before it pings
	// Redis, and then how long it waits for anything, the answer included:
	// a connection that died without a FIN or RST surfaces as an error
	// within two of these. go-redis does not do this for us: only
	// PubSub.Channel pings, and it then reconnects without telling, which
	// would hide the changes lost meanwhile.
	receiveCheck = 15 * time.Second
	// subscribeTimeout bounds connecting and subscribing; pingTimeout the
	// sending of one ping.
	subscribeTimeout = 10 * time.Second
	pingTimeout      = 5 * time.Second
)

// Reasons the hub closes a stream, also the label of
// api_event_streams_closed_total.
const (
	closedTooSlow = "too_slow"
	// closedListenerLost: the Redis subscription failed. The value keeps
	// the name it had when PostgreSQL fed the hub, so that the metric's
	// series continue.
	closedListenerLost = "listener_lost"
	closedShutdown     = "shutdown"
)

var (
	errNotSubscribed  = errors.New("event subscription not active")
	errTooManyStreams = errors.New("too many event streams for the tenant")
)

// hub holds one Redis pattern subscription on every tenant's channel
// ([live.AllTenants]) and fans the changes the notify stage publishes out
// to the streams of each tenant.
//
// One connection delivers messages in the order Redis received them, and
// the notify stage publishes a task's changes in order, one at a time (a
// FIFO topic, one consumer per message group). The hub hands each message
// to every stream of its tenant before reading the next, so every stream
// sees a task's changes in version order, possibly one twice (the notify
// stage runs at least once). It never waits for a stream: one whose buffer
// is full is closed. A stream is also closed when the subscription fails,
// because Redis keeps nothing for an absent subscriber; a stream that
// stays open has missed nothing since it opened.
type hub struct {
	rdb     redis.UniversalClient
	log     *slog.Logger
	metrics *metrics
	check   time.Duration // receiveCheck; shorter in tests

	mu         sync.Mutex
	subs       map[uuid.UUID]map[*subscriber]struct{}
	subscribed bool
	up         chan struct{} // closed while subscribed
}

// subscriber is one open stream. The hub sends it ready-made SSE frames
// and closes ch when it drops the stream, after setting reason.
type subscriber struct {
	tenantID uuid.UUID
	ch       chan []byte
	reason   string
}

func newHub(rdb redis.UniversalClient, log *slog.Logger, m *metrics) *hub {
	return &hub{rdb: rdb, log: log, metrics: m, check: receiveCheck, subs: map[uuid.UUID]map[*subscriber]struct{}{}, up: make(chan struct{})}
}

// subscribe opens a stream for the tenant, waiting until ctx ends for the
// Redis subscription to be active.
func (h *hub) subscribe(ctx context.Context, tenantID uuid.UUID) (*subscriber, error) {
	h.mu.Lock()
	up := h.up
	h.mu.Unlock()
	select {
	case <-up:
	case <-ctx.Done():
		return nil, errNotSubscribed
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.subscribed {
		return nil, errNotSubscribed
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

// setSubscribed records whether changes are flowing. Going down drops
// every stream with reason: from now on they would miss changes.
func (h *hub) setSubscribed(on bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if on {
		if !h.subscribed {
			h.subscribed = true
			close(h.up)
		}
		return
	}
	if h.subscribed {
		h.subscribed = false
		h.up = make(chan struct{})
	}
	for _, subs := range h.subs {
		for s := range subs {
			h.drop(s, reason)
		}
	}
}

// run holds the subscription until ctx ends, subscribing again with
// exponential backoff after failures.
func (h *hub) run(ctx context.Context) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 30 * time.Second
	defer h.setSubscribed(false, closedShutdown)
	for {
		subscribed, err := h.listen(ctx)
		if ctx.Err() != nil {
			return nil
		}
		h.setSubscribed(false, closedListenerLost)
		h.metrics.listenFailed()
		if subscribed {
			b.Reset()
		}
		wait := b.NextBackOff()
		h.log.WarnContext(ctx, "event subscription failed; open streams were closed, subscribing again",
			slog.String("error", err.Error()), slog.Duration("retry_in", wait))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil
		}
	}
}

// listen holds one subscription until it fails or ctx ends. subscribed
// reports whether Redis confirmed it. It always returns an error.
func (h *hub) listen(ctx context.Context) (subscribed bool, err error) {
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	defer cancel()
	// PSubscribe only sends the command (and keeps its error to itself);
	// the confirmation below is what proves the subscription exists.
	ps := h.rdb.PSubscribe(sctx, live.AllTenants)
	defer func() { _ = ps.Close() }()
	// A read in progress does not watch ctx; closing the PubSub ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()

	msg, err := ps.ReceiveTimeout(sctx, subscribeTimeout)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil {
		return false, fmt.Errorf("subscribe to %s: %w", live.AllTenants, err)
	}
	if sub, ok := msg.(*redis.Subscription); !ok || sub.Kind != "psubscribe" {
		return false, fmt.Errorf("subscribe to %s: unexpected first reply %v", live.AllTenants, msg)
	}
	h.setSubscribed(true, "")
	h.log.InfoContext(ctx, "event subscription active", slog.String("pattern", live.AllTenants))

	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, h.check)
		switch {
		case ctx.Err() != nil:
			return true, ctx.Err()
		case isTimeout(err) && !pinged:
			// Quiet for a while: make Redis answer, so that a dead
			// connection shows up as a second timeout.
			pctx, cancel := context.WithTimeout(ctx, pingTimeout)
			err = ps.Ping(pctx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
			pinged = true
		case isTimeout(err):
			return true, fmt.Errorf("nothing from Redis within %s of a ping", h.check)
		case err != nil:
			return true, fmt.Errorf("receive: %w", err)
		default:
			pinged = false
			switch m := msg.(type) {
			case *redis.Message:
				h.deliver(ctx, m.Channel, m.Payload)
			case *redis.Subscription:
				// go-redis reconnects and subscribes again by itself when
				// it deems a connection unusable; whatever was published
				// in between is lost, so this counts as a failure.
				return true, fmt.Errorf("the client renewed the subscription (%s): changes may have been missed", m)
			}
		}
	}
}

// isTimeout tells a read deadline that passed from a failed connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// deliver turns one published change into an SSE frame for its tenant.
// The tenant is the channel's: a payload that names another tenant is
// refused, so a mistake in a publisher cannot show a change to the wrong
// tenant.
func (h *hub) deliver(ctx context.Context, channel, payload string) {
	tenantID, ok := live.TenantOf(channel)
	change, err := live.Decode(payload)
	if !ok || err != nil || change.TenantID != tenantID || change.Subject() == uuid.Nil {
		h.log.WarnContext(ctx, "ignoring a malformed state change", slog.String("channel", channel), slog.Int("bytes", len(payload)))
		return
	}
	// Encoded again rather than passed on: the data line holds exactly the
	// fields of live.Change, and JSON from json.Marshal has no newline that
	// would end the event early.
	data, err := json.Marshal(change)
	if err != nil {
		h.log.WarnContext(ctx, "ignoring a state change that does not encode", slog.String("subject", change.Subject().String()))
		return
	}
	h.dispatch(tenantID, frame(change, data))
}

// frame is the server-sent event of one change. Its id is
// <task_id>:<version>: it names the change, and a repeat of it (the notify
// stage runs at least once) carries the same id. The data's event_id names
// the task.state.changed event it came from.
func frame(change live.Change, data []byte) []byte {
	return fmt.Appendf(nil, "id: %s:%d\nevent: %s\ndata: %s\n\n", change.Subject(), change.Version, catalog.EventTaskStateChanged, data)
}
