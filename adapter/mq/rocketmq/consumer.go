package rocketmq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// Consumer is a RocketMQ simple consumer of one consumer group.
//
// It replaces its client when the proxy is up but has lost the client's
// settings, and after reopenAfter other receive failures in a row. The
// v5.1.4 client does not resend its settings when its telemetry stream
// comes back after a proxy restart (apache/rocketmq-clients#1137); until its
// 5-minute settings sync, every receive then fails on the proxy ("settings"
// is null) and every heartbeat is refused (UNRECOGNIZED_CLIENT_TYPE). A fresh
// client sends them at start. Messages received by the old client are still
// settled: ACKs and invisible-duration changes go by receipt handle, the
// ACKs in calls of their own (see [Consumer.Ack]), the changes through the
// new client.
//
// A receive the old client has in flight can hang on a proxy that came
// back without its settings, so recovery does not wait for receives to
// fail: while receives are failing, a watcher replaces the client as soon
// as a broker serves the consumer's topic again (a route query answers
// with readable queues, see [QueryRoute]; an open port is not enough, a
// client started before its broker registered has receives that hang), and
// a replacement ends the old client's receives at once (they return no
// messages). The watcher keeps watching until a receive succeeds: a
// receive still unanswered hungAfter past its long poll is taken for hung
// and its client replaced too.
type Consumer struct {
	cfg    config.RocketMQ
	params ConsumerParams
	log    *slog.Logger
	acks   *acks // nil: ACKs go through the client, one call each

	mu       sync.Mutex
	consumer rmq.SimpleConsumer
	retired  context.Context // done once consumer is replaced
	retire   context.CancelFunc
	failures int // receive failures of the current client, in a row
	// awaiting is when the current client's oldest unanswered receive was
	// sent; zero while none is.
	awaiting  time.Time
	reopening bool
	watching  bool          // the recovery watcher runs
	closed    chan struct{} // closed by Close: the watcher stops
	// A client start that fails still leaves goroutines behind in v5.1.4, so
	// failed starts are spaced out: from reopenFloor, doubling to
	// reopenCeiling. The wait starts again from the floor as soon as the
	// proxy answers with a status. While a broker serves the topic again,
	// starts are spaced by at most reopenReachable, so a replacement follows
	// the proxy's readiness within seconds, however long it was away.
	reopenWait time.Duration
	lastReopen time.Time
	// lastReplaced is when a fresh client last started.
	lastReplaced time.Time
	nextReopen   time.Time
	// The failure streak across replacements, for the recovery log line.
	streak       int
	failingSince time.Time
}

var _ mq.Consumer = (*Consumer)(nil)

// ConsumerParams says what a Consumer reads.
type ConsumerParams struct {
	Group string // broker name of the consumer group
	// Filters maps each broker topic name to its tag expression ("*", "A||B").
	Filters map[string]string
	// Await is how long one Receive long-polls for messages; 20 s when zero.
	// The proxy long-polls at least 5 s and refuses awaits under ~2.5 s.
	Await time.Duration
	// Logger gets one line per client replacement and per recovery ("rocketmq
	// consumer receiving again", with how long receives failed); nil: none.
	Logger *slog.Logger
}

// NewConsumer starts a simple consumer.
func NewConsumer(cfg config.RocketMQ, params ConsumerParams) (*Consumer, error) {
	if params.Await == 0 {
		params.Await = 20 * time.Second
	}
	if params.Await < 3*time.Second {
		return nil, fmt.Errorf("new rocketmq consumer for %s: await %s is below the proxy's minimum long poll; use at least 3s", params.Group, params.Await)
	}
	routeClientLog(cfg)
	acks, err := newAcks(cfg, params.Group)
	if err != nil {
		return nil, fmt.Errorf("new rocketmq consumer for %s: %w", params.Group, err)
	}
	c := &Consumer{cfg: cfg, params: params, log: params.Logger, acks: acks, closed: make(chan struct{})}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	sc, err := c.open()
	if err != nil {
		return nil, err
	}
	c.consumer = sc
	c.retired, c.retire = context.WithCancel(context.Background())
	return c, nil
}

func (c *Consumer) open() (rmq.SimpleConsumer, error) {
	subs := make(map[string]*rmq.FilterExpression, len(c.params.Filters))
	for topic, expr := range c.params.Filters {
		subs[topic] = rmq.NewFilterExpression(expr)
	}
	for try := 1; ; try++ {
		sc, err := rmq.NewSimpleConsumer(clientConfig(c.cfg, c.params.Group),
			rmq.WithSimpleAwaitDuration(c.params.Await), rmq.WithSimpleSubscriptionExpressions(subs))
		if err != nil {
			return nil, fmt.Errorf("new rocketmq consumer for %s: %w", c.params.Group, err)
		}
		err = startWithin(sc.Start, startTimeout)
		if err == nil {
			return sc, nil
		}
		if !racedStart(err) || try == startTries {
			_ = sc.GracefulStop() // what of the failed start can be stopped
			return nil, fmt.Errorf("start rocketmq consumer for %s at %s: %w", c.params.Group, c.cfg.Endpoint, startError(c.cfg, err))
		}
		_ = sc.GracefulStop()
	}
}

func (c *Consumer) current() rmq.SimpleConsumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.consumer
}

// topics names what the consumer reads, for its log lines.
func (c *Consumer) topics() string {
	names := make([]string, 0, len(c.params.Filters))
	for t := range c.params.Filters {
		names = append(names, t)
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

// Receive long-polls for up to max messages. An empty result is not an error.
func (c *Consumer) Receive(ctx context.Context, max int, invisible time.Duration) ([]*mq.Received, error) {
	sent := time.Now()
	c.mu.Lock()
	sc, retired := c.consumer, c.retired
	if c.awaiting.IsZero() {
		c.awaiting = sent
	}
	c.mu.Unlock()
	if retired == nil { // a Consumer not made by NewConsumer
		retired = context.Background()
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(retired, cancel)()
	views, err := sc.Receive(rctx, int32(max), invisible)
	c.answered(sc, sent)
	if err != nil && ctx.Err() == nil && retired.Err() != nil {
		return nil, nil // the client was replaced meanwhile: receive again
	}
	if err != nil {
		if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
			c.succeeded(sent)
			return nil, nil
		}
		err = access(err)
		// A fresh client brings no new credentials or grants: only other
		// failures count towards replacing it.
		refused := errors.Is(err, mq.ErrUnauthenticated) || errors.Is(err, mq.ErrForbidden)
		if ctx.Err() == nil && !refused {
			replaced, rerr := c.failed(sc, err)
			if rerr != nil {
				err = errors.Join(err, rerr)
			}
			if replaced {
				// The failure was the old client's: the caller receives
				// again at once, through the fresh one, instead of pausing
				// as after a failure.
				return nil, nil
			}
		}
		return nil, fmt.Errorf("receive: %w", err)
	}
	c.succeeded(sent)
	out := make([]*mq.Received, 0, len(views))
	for _, v := range views {
		out = append(out, received(v))
	}
	return out, nil
}

func received(v *rmq.MessageView) *mq.Received {
	r := &mq.Received{
		Message: mq.Message{
			Topic:      v.GetTopic(),
			Keys:       v.GetKeys(),
			Properties: v.GetProperties(),
			Body:       v.GetBody(),
		},
		MessageID:       v.GetMessageId(),
		DeliveryAttempt: int(v.GetDeliveryAttempt()),
		Handle:          v,
	}
	if tag := v.GetTag(); tag != nil {
		r.Tag = *tag
	}
	if group := v.GetMessageGroup(); group != nil {
		r.MessageGroup = *group
	}
	if at := v.GetDeliveryTimestamp(); at != nil {
		r.DeliveryTime = *at
	}
	if at := v.GetBornTimestamp(); at != nil {
		r.BornAt = *at
	}
	return r
}

func view(msg *mq.Received) (*rmq.MessageView, error) {
	v, ok := msg.Handle.(*rmq.MessageView)
	if !ok {
		return nil, errors.New("message was not received by a rocketmq consumer")
	}
	return v, nil
}

// Ack settles msg, in one AckMessage call with the ACKs of the consumer's
// other messages that are waiting then (see [acks]). It returns once the
// proxy answered for msg.
func (c *Consumer) Ack(ctx context.Context, msg *mq.Received) error {
	v, err := view(msg)
	if err != nil {
		return err
	}
	if c.acks != nil {
		err = c.acks.ack(ctx, v.GetTopic(), v.GetMessageId(), v.GetReceiptHandle())
	} else {
		err = c.current().Ack(ctx, v)
	}
	if err != nil {
		return fmt.Errorf("ack %s: %w", msg.MessageID, access(err))
	}
	return nil
}

// ChangeInvisibleDuration hides msg for d more, after which it is redelivered.
// The client call takes no context; it is bounded by the client's own
// request timeout.
func (c *Consumer) ChangeInvisibleDuration(_ context.Context, msg *mq.Received, d time.Duration) error {
	v, err := view(msg)
	if err != nil {
		return err
	}
	if err := c.current().ChangeInvisibleDuration(v, d); err != nil {
		return fmt.Errorf("change invisible duration of %s: %w", msg.MessageID, access(err))
	}
	return nil
}

// Close stops the consumer.
func (c *Consumer) Close() error {
	c.mu.Lock()
	if c.closed == nil {
		c.closed = make(chan struct{})
	}
	select {
	case <-c.closed:
	default:
		close(c.closed)
	}
	c.mu.Unlock()
	return c.current().GracefulStop()
}

// OpenGroup opens one consumer per subscription of g: a simple consumer
// polls its topics in turn and would wait out an empty one's long poll
// before reading the next. On error nothing stays open.
func OpenGroup(cfg config.RocketMQ, g catalog.Group, await time.Duration, log *slog.Logger) ([]*Consumer, error) {
	var out []*Consumer
	for _, sub := range g.Subscriptions {
		c, err := NewConsumer(cfg, ConsumerParams{
			Group:   g.BrokerName(),
			Filters: map[string]string{sub.Topic.BrokerName(): sub.FilterExpression()},
			Await:   await,
			Logger:  log,
		})
		if err != nil {
			for _, opened := range out {
				_ = opened.Close()
			}
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
