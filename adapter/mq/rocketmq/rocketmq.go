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
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"
	"github.com/apache/rocketmq-clients/golang/v5/pkg/zaplog/ctxzap"
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
//
// After a proxy restart the v5.1.4 client does not send its settings
// again (see [Consumer]). The proxy reads no settings on a send, so sends
// go on (TestProxyRestartConsumersRecover shows it); only its heartbeats
// are refused, which matters to transactional producers, and this is not
// one. Should a send ever be refused for the lost settings, the client is
// replaced and the send tried once more through the new one.
type Producer struct {
	cfg    config.RocketMQ
	topics []string

	mu       sync.Mutex
	producer rmq.Producer
}

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
		if level == "warn" || level == "error" {
			quietRPCLog()
		}
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

// quietRPCLog drops the client's RPC access log. Besides its own log,
// client v5.1.4 writes one JSON line at info for every call it makes
// (Send, Ack, heartbeats...) to /tmp/rocketmq-logger.log, whatever the
// log level, through a gRPC interceptor of its connections; a failed call
// is returned to its caller all the same. The connections are made by the
// package's NewRpcClient, which takes no option from a client's config:
// wrapping it is the one way to give them a logger. Its no-op logger is
// ctxzap's, which the interceptor falls back on without one.
func quietRPCLog() {
	newRPCClient := rmq.NewRpcClient
	quiet := rmq.WithRpcClientConnOption(rmq.WithZapLogger(ctxzap.Logger(context.Background())))
	rmq.NewRpcClient = func(target string, opts ...rmq.RpcClientOption) (rmq.RpcClient, error) {
		return newRPCClient(target, append(opts[:len(opts):len(opts)], quiet)...)
	}
}

// NewProducer starts a producer for the given broker topics (at least one:
// the v5 client never finishes starting without a topic route). It may send
// to other topics too; their routes are fetched on first send.
func NewProducer(cfg config.RocketMQ, topics ...string) (*Producer, error) {
	if len(topics) == 0 {
		return nil, errors.New("new rocketmq producer: name at least one topic")
	}
	routeClientLog(cfg)
	p, err := startProducer(cfg, topics)
	if err != nil {
		return nil, err
	}
	return &Producer{cfg: cfg, topics: topics, producer: p}, nil
}

func startProducer(cfg config.RocketMQ, topics []string) (rmq.Producer, error) {
	for try := 1; ; try++ {
		p, err := rmq.NewProducer(clientConfig(cfg, ""), rmq.WithTopics(topics...))
		if err != nil {
			return nil, fmt.Errorf("new rocketmq producer: %w", err)
		}
		err = startWithin(p.Start, startTimeout)
		if err == nil {
			return p, nil
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
	client := p.current()
	receipts, err := client.Send(ctx, out)
	if err != nil && settingsLost(err) && p.replace(client) == nil {
		receipts, err = p.current().Send(ctx, out)
	}
	if err != nil {
		return "", fmt.Errorf("send to %s: %w", msg.Topic, access(err))
	}
	if len(receipts) == 0 {
		return "", fmt.Errorf("send to %s: broker returned no receipt", msg.Topic)
	}
	return receipts[0].MessageID, nil
}

func (p *Producer) current() rmq.Producer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.producer
}

// replace starts a new client in place of old, unless a concurrent send
// already did. Sends wait for it: they would fail on the old client.
func (p *Producer) replace(old rmq.Producer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producer != old {
		return nil
	}
	fresh, err := startProducer(p.cfg, p.topics)
	if err != nil {
		return err
	}
	p.producer = fresh
	go func() { _ = old.GracefulStop() }()
	return nil
}

// Close stops the producer.
func (p *Producer) Close() error { return p.current().GracefulStop() }

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

// Replacement pacing: see Consumer.
const (
	reopenAfter     = 3
	reopenFloor     = time.Second
	reopenCeiling   = 2 * time.Minute
	reopenReachable = 2 * time.Second
	// watchEvery is how often the watcher asks for the topic's route while
	// receives fail: the moment a broker serves it again is what a
	// consumer's recovery is counted from.
	watchEvery = 250 * time.Millisecond
	// hungAfter: a receive unanswered this long past its await is hung. The
	// proxy answers a long poll by its await; the client's own deadline
	// comes only 3 s later, on every receive of a hung client.
	hungAfter = time.Second
	// routeTimeout bounds the watcher's route query.
	routeTimeout = 2 * time.Second
)

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

// answered marks the receive of sc sent at sent as no longer awaited.
func (c *Consumer) answered(sc rmq.SimpleConsumer, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.consumer == sc && c.awaiting.Equal(sent) {
		c.awaiting = time.Time{}
	}
}

// hung reports a receive of the current client unanswered well past its
// long poll. The caller holds c.mu.
func (c *Consumer) hung() bool {
	return !c.awaiting.IsZero() && time.Since(c.awaiting) > c.params.Await+hungAfter
}

// serving reports whether a broker serves the consumer's topics again: the
// proxy answers a route query for each with readable queues. A proxy that
// refuses the query itself is up, and a fresh client is the only way to
// find out more.
func (c *Consumer) serving() bool {
	for topic := range c.params.Filters {
		n, err := QueryRoute(context.Background(), c.cfg, topic, routeTimeout)
		if errors.Is(err, mq.ErrUnauthenticated) || errors.Is(err, mq.ErrForbidden) {
			continue
		}
		if err != nil || n == 0 {
			return false
		}
	}
	return true
}

// succeeded ends a failure streak with a receive sent at sent. The
// consumer was listening again from then: a long poll on an idle topic
// answers only after its await, but a message published meanwhile would
// have been delivered at once. So the recovery line's deaf time ends at
// sent, and the line says when that was (listening_since).
func (c *Consumer) succeeded(sent time.Time) {
	c.mu.Lock()
	streak, since := c.streak, c.failingSince
	c.failures, c.streak, c.reopenWait, c.nextReopen = 0, 0, 0, time.Time{}
	c.mu.Unlock()
	if streak > 0 {
		c.log.Info("rocketmq consumer receiving again", slog.String("consumer_group", c.params.Group), slog.String("topic", c.topics()),
			slog.Int("failures", streak), slog.Time("listening_since", sent),
			slog.Duration("deaf_for", max(sent.Sub(since), 0).Round(time.Millisecond)))
	}
}

// settingsLost reports an answer of a proxy that is up but no longer knows
// the client's settings: its receive reads them and fails on their absence
// (a NullPointerException naming Settings), its heartbeat refuses the
// client as UNRECOGNIZED_CLIENT_TYPE.
func settingsLost(err error) bool {
	if status, ok := rmq.AsErrRpcStatus(err); ok && v2.Code(status.GetCode()) == v2.Code_UNRECOGNIZED_CLIENT_TYPE {
		return true
	}
	text := err.Error()
	return strings.Contains(text, "UNRECOGNIZED_CLIENT_TYPE") || strings.Contains(text, "cannot find client settings") ||
		strings.Contains(text, `"settings" is null`) || strings.Contains(text, "settings is null") ||
		strings.Contains(text, "Settings.getSubscription()") || strings.Contains(text, "Settings.getBackoffPolicy()")
}

// proxyAnswered reports a failure the proxy itself answered (a status of
// its own): the proxy is up, whatever went wrong.
func proxyAnswered(err error) bool {
	_, ok := rmq.AsErrRpcStatus(err)
	return ok
}

// failed counts a receive failure of sc and replaces the client when the
// proxy lost its settings, or once other failures pile up. A replacement
// that cannot start is tried again on a later failure. The lock is not held
// while the new client starts, so ACKs of messages in flight go on
// meanwhile. replaced reports a fresh client that started now, and whose
// predecessor was not itself replaced in the last reopenReachable: a
// client the proxy refuses again at once is retried at the caller's pace.
func (c *Consumer) failed(sc rmq.SimpleConsumer, cause error) (replaced bool, err error) {
	lost := settingsLost(cause)
	c.mu.Lock()
	if c.consumer != sc || c.reopening {
		c.mu.Unlock()
		return false, nil // replaced, or being replaced, by a concurrent receive
	}
	if c.streak == 0 {
		c.failingSince = time.Now()
	}
	c.failures++
	c.streak++
	if !c.watching && c.closed != nil {
		c.watching = true
		go c.watch()
	}
	if lost || proxyAnswered(cause) {
		c.reopenWait, c.nextReopen = 0, time.Time{}
	}
	if !lost && c.failures < reopenAfter {
		c.mu.Unlock()
		return false, nil
	}
	waiting := time.Now().Before(c.nextReopen)
	soon := time.Since(c.lastReopen) >= reopenReachable
	again := time.Since(c.lastReplaced) >= reopenReachable
	c.reopening = true
	c.mu.Unlock()

	// No client starts while no broker serves the topic: its receives
	// would hang, and the watcher replaces it the moment one does. A
	// failed start waits out its backoff, which ends early once a broker
	// serves the topic.
	if (waiting && !soon) || !c.serving() {
		c.mu.Lock()
		c.reopening = false
		c.mu.Unlock()
		return false, nil
	}
	reason := "receives failing"
	if lost {
		reason = "the proxy lost the client's settings"
	}
	if err := c.replace(sc, reason); err != nil {
		return false, err
	}
	return again, nil
}

// replace starts a new client in place of sc, which the caller marked
// c.reopening. On success the old client's receives end and it stops.
func (c *Consumer) replace(sc rmq.SimpleConsumer, reason string) error {
	fresh, err := c.open()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reopening = false
	c.lastReopen = time.Now()
	if err != nil {
		c.reopenWait = min(max(2*c.reopenWait, reopenFloor), reopenCeiling)
		c.nextReopen = c.lastReopen.Add(c.reopenWait)
		return fmt.Errorf("replace rocketmq consumer (next try in %s, or once the proxy's port accepts): %w", c.reopenWait, err)
	}
	if c.retire != nil {
		c.retire()
	}
	c.consumer, c.failures, c.reopenWait, c.nextReopen, c.awaiting = fresh, 0, 0, time.Time{}, time.Time{}
	c.lastReplaced = c.lastReopen
	c.retired, c.retire = context.WithCancel(context.Background())
	c.log.Info("rocketmq consumer replaced", slog.String("consumer_group", c.params.Group), slog.String("topic", c.topics()),
		slog.String("reason", reason))
	// The old client's stop waits on the broker; it must not hold receives.
	go func() { _ = sc.GracefulStop() }()
	return nil
}

// watch runs while receives are failing: every watchEvery, a client that
// has failed since its start, or whose receive hangs (and that was not
// replaced in the last reopenReachable), is replaced once a broker serves
// the topic, without waiting for a receive of it to fail again. It ends
// when a receive succeeds, or with Close.
func (c *Consumer) watch() {
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.closed:
			return
		case <-tick.C:
		}
		c.mu.Lock()
		if c.streak == 0 {
			c.watching = false
			c.mu.Unlock()
			return
		}
		sc := c.consumer
		due := (c.failures > 0 || c.hung()) && !c.reopening && time.Since(c.lastReopen) >= reopenReachable
		if due {
			c.reopening = true
		}
		c.mu.Unlock()
		if !due {
			continue
		}
		if !c.serving() {
			c.mu.Lock()
			c.reopening = false
			c.mu.Unlock()
			continue
		}
		_ = c.replace(sc, "receives failing or hung, a broker serving the topic again")
	}
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
