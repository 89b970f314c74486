// Package rocketmq implements the mq interfaces with the RocketMQ 5 gRPC
// client (github.com/apache/rocketmq-clients/golang/v5), talking to a
// RocketMQ proxy.
//
// # Known upstream data race
//
// Client v5.1.4 applies the settings the proxy pushes over its telemetry
// stream without a lock, while its own senders and receivers read them
// (apache/rocketmq-clients#294, #1014). The race detector reports it in any
// test that drives the real client, so those tests carry `//go:build !race`,
// are named TestRealBroker*, and `make test` runs them in a second pass
// without -race. Everything else runs with -race.
package rocketmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

func clientConfig(cfg config.RocketMQ, group string) *rmq.Config {
	return &rmq.Config{
		Endpoint:      cfg.Endpoint,
		ConsumerGroup: group,
		Credentials:   &credentials.SessionCredentials{AccessKey: cfg.AccessKey, AccessSecret: cfg.SecretKey},
	}
}

// access marks the proxy's refusals with mq.ErrUnauthenticated or
// mq.ErrForbidden, keeping the proxy's words. The proxy answers both a bad
// signature and a missing permission with UNAUTHORIZED, told apart only by
// its message; and the client flattens the status into its own text when a
// start fails, so the text is what there is to read.
func access(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	if status, ok := rmq.AsErrRpcStatus(err); ok {
		switch v2.Code(status.GetCode()) {
		case v2.Code_UNAUTHORIZED, v2.Code_FORBIDDEN:
		default:
			return err
		}
	} else if !strings.Contains(text, "CODE: UNAUTHORIZED") && !strings.Contains(text, "CODE: FORBIDDEN") {
		return err
	}
	if strings.Contains(text, "CODE: FORBIDDEN") || strings.Contains(text, "no permission") {
		return fmt.Errorf("%w: %w", mq.ErrForbidden, err)
	}
	return fmt.Errorf("%w: %w", mq.ErrUnauthenticated, err)
}

// startError explains a failed client start. When the proxy refuses a
// client's settings for want of a permission, it closes the settings
// stream: the client sees only EOF.
func startError(cfg config.RocketMQ, err error) error {
	err = access(err)
	if cfg.AccessKey != "" && strings.Contains(err.Error(), "failed to sync settings") {
		return fmt.Errorf("%w (with ACL on, the proxy closes the settings stream when user %s may not publish to these topics or consume as this group: %w)",
			err, cfg.AccessKey, mq.ErrForbidden)
	}
	return err
}

// Producer publishes through a RocketMQ proxy.
type Producer struct {
	producer rmq.Producer
}

var _ mq.Producer = (*Producer)(nil)

// startTimeout bounds a client's start: the v5 client waits for its
// settings to sync with no deadline of its own.
const startTimeout = 30 * time.Second

// routeClientLog points the client's own zap logger where cfg says, once
// per process, before the first client starts. The client reads its log
// settings from the environment only (at init and in ResetLogger), and
// writes its console lines to os.Stdout: os.Stdout is pointed at stderr
// for the moment ResetLogger takes it, so that stdout stays the
// commands' own output.
func routeClientLog(cfg config.RocketMQ) {
	clientLogOnce.Do(func() {
		level := cmp.Or(cfg.ClientLogLevel, "warn")
		_ = os.Setenv(rmq.CLIENT_LOG_LEVEL, level)
		if cfg.ClientLogDir != "" {
			_ = os.Setenv(rmq.CLIENT_LOG_ROOT, cfg.ClientLogDir)
			_ = os.Setenv(rmq.ENABLE_CONSOLE_APPENDER, "false")
			rmq.ResetLogger()
			return
		}
		_ = os.Setenv(rmq.ENABLE_CONSOLE_APPENDER, "true")
		stdout := os.Stdout
		os.Stdout = os.Stderr
		rmq.ResetLogger()
		os.Stdout = stdout
	})
}

var clientLogOnce sync.Once

// NewProducer starts a producer for the given broker topics (at least one:
// the v5 client never finishes starting without a topic route). It may send
// to other topics too; their routes are fetched on first send.
func NewProducer(cfg config.RocketMQ, topics ...string) (*Producer, error) {
	if len(topics) == 0 {
		return nil, errors.New("new rocketmq producer: name at least one topic")
	}
	routeClientLog(cfg)
	for try := 1; ; try++ {
		p, err := rmq.NewProducer(clientConfig(cfg, ""), rmq.WithTopics(topics...))
		if err != nil {
			return nil, fmt.Errorf("new rocketmq producer: %w", err)
		}
		err = startWithin(p.Start, startTimeout)
		if err == nil {
			return &Producer{producer: p}, nil
		}
		if !racedStart(err) || try == startTries {
			return nil, fmt.Errorf("start rocketmq producer at %s: %w", cfg.Endpoint, startError(cfg, err))
		}
		_ = p.GracefulStop()
	}
}

// startTries bounds the starts of a client whose start failed on the
// client's own race.
const startTries = 3

// racedStart reports a start that failed on the client's own data race
// (see the package doc): the telemetry command it was marshalling changed
// under it ("grpc: error while marshaling: ... size mismatch"). Nothing is
// wrong with the proxy or the settings, and a fresh client starts.
func racedStart(err error) bool {
	return err != nil && strings.Contains(err.Error(), "error while marshaling")
}

// startWithin runs a client's blocking Start with a deadline. On timeout
// the Start goroutine is left to finish or fail on its own: the client
// offers no way to abort it, and the caller is expected to give up.
func startWithin(start func() error, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- start() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("not started within %s (is the proxy reachable and do the topics exist?)", d)
	}
}

// Send publishes msg and waits for the broker to store it.
func (p *Producer) Send(ctx context.Context, msg *mq.Message) (string, error) {
	out := &rmq.Message{Topic: msg.Topic, Body: msg.Body}
	if msg.Tag != "" {
		out.SetTag(msg.Tag)
	}
	if len(msg.Keys) > 0 {
		out.SetKeys(msg.Keys...)
	}
	if msg.MessageGroup != "" {
		out.SetMessageGroup(msg.MessageGroup)
	}
	if !msg.DeliveryTime.IsZero() {
		out.SetDelayTimestamp(msg.DeliveryTime)
	}
	for k, v := range msg.Properties {
		out.AddProperty(k, v)
	}
	receipts, err := p.producer.Send(ctx, out)
	if err != nil {
		return "", fmt.Errorf("send to %s: %w", msg.Topic, access(err))
	}
	if len(receipts) == 0 {
		return "", fmt.Errorf("send to %s: broker returned no receipt", msg.Topic)
	}
	return receipts[0].MessageID, nil
}

// Close stops the producer.
func (p *Producer) Close() error { return p.producer.GracefulStop() }

// Consumer is a RocketMQ simple consumer of one consumer group.
//
// It replaces its client after reopenAfter receive failures in a row. The
// v5.1.4 client does not resend its settings when its telemetry stream comes
// back after a proxy restart; until its 5-minute settings sync, every receive
// then fails on the proxy ("settings is null"). A fresh client sends them at
// start. Messages received by the old client are still settled through the
// new one: ACKs and invisible-duration changes go by receipt handle.
type Consumer struct {
	cfg    config.RocketMQ
	params ConsumerParams

	mu        sync.Mutex
	consumer  rmq.SimpleConsumer
	failures  int
	reopening bool
	// A client start that fails still leaves goroutines behind in v5.1.4, so
	// replacements during a long outage are spaced out: from 5 s, doubling
	// to 2 min.
	reopenWait time.Duration
	nextReopen time.Time
}

// reopenAfter is how many receive failures in a row replace the client.
const reopenAfter = 3

var _ mq.Consumer = (*Consumer)(nil)

// ConsumerParams says what a Consumer reads.
type ConsumerParams struct {
	Group string // broker name of the consumer group
	// Filters maps each broker topic name to its tag expression ("*", "A||B").
	Filters map[string]string
	// Await is how long one Receive long-polls for messages; 20 s when zero.
	// The proxy long-polls at least 5 s and refuses awaits under ~2.5 s.
	Await time.Duration
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
	c := &Consumer{cfg: cfg, params: params}
	sc, err := c.open()
	if err != nil {
		return nil, err
	}
	c.consumer = sc
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

// Receive long-polls for up to max messages. An empty result is not an error.
func (c *Consumer) Receive(ctx context.Context, max int, invisible time.Duration) ([]*mq.Received, error) {
	sc := c.current()
	views, err := sc.Receive(ctx, int32(max), invisible)
	if err != nil {
		if status, ok := rmq.AsErrRpcStatus(err); ok && status.GetCode() == int32(v2.Code_MESSAGE_NOT_FOUND) {
			c.succeeded()
			return nil, nil
		}
		err = access(err)
		// A fresh client brings no new credentials or grants: only other
		// failures count towards replacing it.
		refused := errors.Is(err, mq.ErrUnauthenticated) || errors.Is(err, mq.ErrForbidden)
		if ctx.Err() == nil && !refused {
			if rerr := c.failed(sc); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
		return nil, fmt.Errorf("receive: %w", err)
	}
	c.succeeded()
	out := make([]*mq.Received, 0, len(views))
	for _, v := range views {
		out = append(out, received(v))
	}
	return out, nil
}

func (c *Consumer) succeeded() {
	c.mu.Lock()
	c.failures = 0
	c.mu.Unlock()
}

// failed counts a receive failure of sc and replaces the client once they
// pile up. A replacement that cannot start is tried again on the next
// failure. The lock is not held while the new client starts, so ACKs of
// messages in flight go on meanwhile.
func (c *Consumer) failed(sc rmq.SimpleConsumer) error {
	c.mu.Lock()
	if c.consumer != sc || c.reopening {
		c.mu.Unlock()
		return nil // replaced, or being replaced, by a concurrent receive
	}
	c.failures++
	if c.failures < reopenAfter || time.Now().Before(c.nextReopen) {
		c.mu.Unlock()
		return nil
	}
	c.reopening = true
	c.mu.Unlock()

	fresh, err := c.open()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reopening = false
	if err != nil {
		c.reopenWait = min(max(2*c.reopenWait, 5*time.Second), 2*time.Minute)
		c.nextReopen = time.Now().Add(c.reopenWait)
		return fmt.Errorf("replace rocketmq consumer (next try in %s): %w", c.reopenWait, err)
	}
	c.consumer, c.failures, c.reopenWait = fresh, 0, 0
	// The old client's stop waits on the broker; it must not hold receives.
	go func() { _ = sc.GracefulStop() }()
	return nil
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

// Ack settles msg.
func (c *Consumer) Ack(ctx context.Context, msg *mq.Received) error {
	v, err := view(msg)
	if err != nil {
		return err
	}
	if err := c.current().Ack(ctx, v); err != nil {
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
func (c *Consumer) Close() error { return c.current().GracefulStop() }

// OpenGroup opens one consumer per subscription of g: a simple consumer
// polls its topics in turn and would wait out an empty one's long poll
// before reading the next. On error nothing stays open.
func OpenGroup(cfg config.RocketMQ, g catalog.Group, await time.Duration) ([]*Consumer, error) {
	var out []*Consumer
	for _, sub := range g.Subscriptions {
		c, err := NewConsumer(cfg, ConsumerParams{
			Group:   g.BrokerName(),
			Filters: map[string]string{sub.Topic.BrokerName(): sub.FilterExpression()},
			Await:   await,
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
