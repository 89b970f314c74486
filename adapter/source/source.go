// Package source is the RocketMQ source adapter: it receives the messages of
// one consumer group, turns each into a CloudEvent and delivers it to the
// group's stage function, over HTTP or in process.
//
// # Guarantee
//
// A message is ACKed only after the function returned success, which a
// stage returns only after its inbox-protected transaction committed, or
// after the message was recorded in message_quarantine. Everything else goes
// back to the broker: its invisible duration becomes a backoff delay, and
// the broker redelivers it until the group's maximum delivery attempts move
// it to the dead-letter topic. So a message is processed at least once and
// never lost; the inbox makes its effect happen once.
//
// Outcomes (DESIGN.md §6):
//
//   - success (2xx, nil), including duplicates and stale no-ops: ACK;
//   - poison (not a CloudEvent, invalid envelope, a 4xx, an
//     outcome.Permanent error): quarantine, then ACK;
//   - anything else (5xx, timeout, refused connection after the cold-start
//     budget): back to the broker with exponential backoff.
//
// # Stopping
//
// Run starts no receive once its context ends, and waits up to DrainTimeout
// from then for messages in flight. Work still running after that is
// abandoned without an ACK: the broker redelivers it once its invisible
// duration ends. A receive already long-polling is not cut short: cut, it
// leaves the proxy holding what it takes for the rest of the poll, hidden
// for the whole invisible duration. It runs to its end instead (within the
// drain deadline), and what it brings goes straight back to the broker.
package source

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Params configures a Source.
type Params struct {
	Group catalog.Group
	// Consumers read the group's subscriptions, one consumer per topic: a
	// RocketMQ simple consumer polls its topics in turn and waits out its
	// long poll on an empty one, which would stall the others.
	Consumers  []mq.Consumer
	Deliverer  Deliverer
	Quarantine quarantine.Execer // where poison is recorded
	// Workers bounds concurrent deliveries; config.DefaultSourceWorkers
	// when zero. One worker of them is each consumer's own, so that one
	// subscription's long deliveries never leave another without a receive
	// (a group has at least one worker per consumer whatever Workers says);
	// the rest are shared. Receive asks for no more messages than there are
	// free workers, so prefetch is bounded too.
	Workers int
	// Invisible is how long a received message stays hidden while it is
	// handled; config.DefaultSourceInvisible when zero. It must exceed
	// HandlerTimeout.
	Invisible time.Duration
	// HandlerTimeout bounds one delivery; config.DefaultSourceHandlerTimeout
	// when zero.
	HandlerTimeout time.Duration
	// RetryDelay gives the backoff after a failed attempt; exponential from
	// 10 s (RocketMQ's minimum invisible time) to 10 min when nil.
	RetryDelay RetryDelayFunc
	// DrainTimeout bounds the wait for in-flight work at stop; 30 s when zero.
	DrainTimeout time.Duration
	Logger       *slog.Logger
	Metrics      *Metrics
}

// Source runs one consumer group's delivery loop.
type Source struct {
	p    Params
	late prometheus.Observer // the group's wake-up lateness
}

// New returns a Source; it panics on a missing dependency (a programming
// error at start-up).
func New(p Params) *Source {
	if len(p.Consumers) == 0 || p.Deliverer == nil || p.Quarantine == nil || p.Group.Name == "" {
		panic("source.New: Group, Consumers, Deliverer and Quarantine are required")
	}
	p.Workers = cmp.Or(max(p.Workers, 0), config.DefaultSourceWorkers)
	p.Invisible = cmp.Or(max(p.Invisible, 0), config.DefaultSourceInvisible)
	p.HandlerTimeout = cmp.Or(max(p.HandlerTimeout, 0), config.DefaultSourceHandlerTimeout)
	if p.RetryDelay == nil {
		p.RetryDelay = ExponentialDelay(10*time.Second, 10*time.Minute)
	}
	if p.DrainTimeout <= 0 {
		p.DrainTimeout = 30 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Metrics == nil {
		p.Metrics = NewMetrics(nil)
	}
	return &Source{p: p, late: p.Metrics.lateness.WithLabelValues(p.Group.Name)}
}

// Run receives and delivers until ctx ends, then drains. It returns nil
// after a clean stop; receive errors are logged and retried, never fatal.
func (s *Source) Run(ctx context.Context) error {
	// In-flight work outlives the receive loops' context so a stop lets it
	// finish and ACK; abandon cancels it after the drain timeout.
	work, abandon := context.WithCancel(context.WithoutCancel(ctx))
	defer abandon()
	// Receives under way at the stop run on until the drain deadline.
	receiving, stopReceiving := context.WithCancel(context.WithoutCancel(ctx))
	defer stopReceiving()
	stopped := make(chan time.Time, 1)
	context.AfterFunc(ctx, func() {
		stopped <- time.Now()
		time.AfterFunc(s.p.DrainTimeout, stopReceiving)
	})

	shared := make(chan struct{}, max(s.p.Workers-len(s.p.Consumers), 0))
	var (
		inFlight, loops sync.WaitGroup
		busy            atomic.Int64
	)
	for _, c := range s.p.Consumers {
		loops.Add(1)
		pool := &workers{own: make(chan struct{}, 1), shared: shared, busy: &busy}
		go func() {
			defer loops.Done()
			s.receiveLoop(ctx, receiving, work, c, pool, &inFlight)
		}()
	}
	loops.Wait()
	drainBy := (<-stopped).Add(s.p.DrainTimeout)

	drained := make(chan struct{})
	go func() { inFlight.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(time.Until(drainBy)):
		s.p.Logger.Warn("drain timeout: abandoning in-flight messages without ACK", slog.String("consumer_group", s.p.Group.Name), slog.Int64("in_flight", busy.Load()))
		abandon()
		select {
		case <-drained:
		case <-time.After(abandonWait):
			// A deliverer that ignores cancellation must not hold the stop
			// forever; its message is unsettled and comes back.
			s.p.Logger.Error("in-flight deliveries ignored cancellation; stopping without them", slog.String("consumer_group", s.p.Group.Name))
		}
	}
	return nil
}

// abandonWait bounds the wait for canceled deliveries to return.
const abandonWait = 5 * time.Second

// workers are the delivery workers one receive loop may take: its own, and
// those the group's loops share.
type workers struct {
	own, shared chan struct{}
	busy        *atomic.Int64 // workers taken across the group
}

// worker is one taken worker; free gives it back.
type worker chan struct{}

func (w worker) free(p *workers) {
	<-w
	p.busy.Add(-1)
}

// take waits for one free worker, then takes every other free one too, up
// to n in all. It returns none once ctx ends.
func (p *workers) take(ctx context.Context, n int) []worker {
	var got []worker
	select {
	case p.own <- struct{}{}:
		got = append(got, p.own)
	case p.shared <- struct{}{}:
		got = append(got, p.shared)
	case <-ctx.Done():
		return nil
	}
	for len(got) < n {
		select {
		case p.own <- struct{}{}:
			got = append(got, p.own)
			continue
		default:
		}
		select {
		case p.shared <- struct{}{}:
			got = append(got, p.shared)
			continue
		default:
		}
		break
	}
	p.busy.Add(int64(len(got)))
	return got
}

// receiveLoop asks c for as many messages as there are free workers, up to
// its share of them, and hands each to a worker. The share keeps a loop
// long-polling an idle topic from holding every free worker while another
// topic of the group has messages waiting. Receives run on receiving, which
// a stop does not end (see the package doc); what one brings after the
// stop is given back.
func (s *Source) receiveLoop(ctx, receiving, work context.Context, c mq.Consumer, pool *workers, inFlight *sync.WaitGroup) {
	share := max(1, s.p.Workers/len(s.p.Consumers))
	for ctx.Err() == nil {
		taken := pool.take(ctx, share)
		if len(taken) == 0 {
			return
		}
		batch, err := c.Receive(receiving, len(taken), s.p.Invisible)
		observeLateness(s.late, batch, time.Now())
		s.hold(batch...)
		for _, w := range taken[len(batch):] {
			w.free(pool)
		}
		taken = taken[:len(batch)]
		if ctx.Err() != nil || err != nil {
			for i, msg := range batch { // none on error from today's consumers, but never leak one
				s.giveBack(c, msg)
				s.release(msg)
				taken[i].free(pool)
			}
			if ctx.Err() != nil {
				return
			}
			s.p.Logger.WarnContext(ctx, "receive failed", slog.String("consumer_group", s.p.Group.Name), slog.String("error", err.Error()))
			s.pause(ctx, time.Second)
			continue
		}
		for _, chain := range chains(batch, taken) {
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				s.handleChain(work, c, chain, pool)
			}()
		}
	}
}

// leased is a received message and the worker that handles it.
type leased struct {
	msg    *mq.Received
	worker worker
}

// chains splits a batch into the runs that must be handled one after
// another: the messages of one FIFO message group, in the order received
// (a FIFO receive may hand over several of one group at once). A message
// without a group is a chain of its own, so it runs in parallel with
// everything else.
func chains(batch []*mq.Received, taken []worker) [][]leased {
	var out [][]leased
	byGroup := map[string]int{}
	for n, msg := range batch {
		l := leased{msg, taken[n]}
		if msg.MessageGroup == "" {
			out = append(out, []leased{l})
			continue
		}
		i, ok := byGroup[msg.MessageGroup]
		if !ok {
			i = len(out)
			byGroup[msg.MessageGroup] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], l)
	}
	return out
}

// handleChain handles a chain in order, freeing a worker slot per message.
// When a message is not settled for good (it will be retried, or work
// stopped), the rest of its chain must not overtake it: they go back to the
// broker unhandled, to follow it.
func (s *Source) handleChain(ctx context.Context, c mq.Consumer, chain []leased, pool *workers) {
	for i, l := range chain {
		result := s.handle(ctx, c, l.msg)
		s.release(l.msg)
		l.worker.free(pool)
		if result == resultAcked || result == resultQuarantined {
			continue
		}
		for _, rest := range chain[i+1:] {
			s.handBack(ctx, c, l.msg, rest.msg)
			s.release(rest.msg)
			rest.worker.free(pool)
		}
		return
	}
}

// hold counts received messages as buffered in the adapter until
// [Source.release]: the client-side buffer of seed 7.13.5.
func (s *Source) hold(msgs ...*mq.Received) {
	for _, msg := range msgs {
		s.p.Metrics.buffered.WithLabelValues(s.p.Group.Name).Inc()
		s.p.Metrics.bufferedB.WithLabelValues(s.p.Group.Name).Add(float64(len(msg.Body)))
	}
}

// release counts a message settled, handed back or given back.
func (s *Source) release(msg *mq.Received) {
	s.p.Metrics.buffered.WithLabelValues(s.p.Group.Name).Dec()
	s.p.Metrics.bufferedB.WithLabelValues(s.p.Group.Name).Sub(float64(len(msg.Body)))
}

// handBack returns a message unhandled because the one before it in its
// message group was not settled; it becomes visible with that one's retry.
func (s *Source) handBack(ctx context.Context, c mq.Consumer, head, msg *mq.Received) {
	s.p.Metrics.deliveries.WithLabelValues(s.p.Group.Name, resultHandedBack).Inc()
	if ctx.Err() != nil {
		return // stopping: the invisible time runs out on its own
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := c.ChangeInvisibleDuration(sctx, msg, s.p.RetryDelay(head.DeliveryAttempt)); err != nil {
		s.p.Logger.WarnContext(ctx, "hand back failed; the message returns when its invisible time ends",
			slog.String("consumer_group", s.p.Group.Name), slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
	}
}

// giveBackAfter is when a message received as the source stopped becomes
// visible again, for another consumer of the group to take.
const giveBackAfter = time.Second

// giveBack returns a message received after the stop, unhandled.
func (s *Source) giveBack(c mq.Consumer, msg *mq.Received) {
	s.p.Metrics.deliveries.WithLabelValues(s.p.Group.Name, resultHandedBack).Inc()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ChangeInvisibleDuration(ctx, msg, giveBackAfter); err != nil {
		s.p.Logger.WarnContext(ctx, "give back at stop failed; the message returns when its invisible time ends",
			slog.String("consumer_group", s.p.Group.Name), slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
	}
}

func (s *Source) pause(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// handle delivers one message and settles it.
func (s *Source) handle(ctx context.Context, c mq.Consumer, msg *mq.Received) string {
	start := time.Now()
	s.p.Metrics.inFlight.WithLabelValues(s.p.Group.Name).Inc()
	defer s.p.Metrics.inFlight.WithLabelValues(s.p.Group.Name).Dec()
	log := s.p.Logger.With(slog.String("consumer_group", s.p.Group.Name), slog.String("message_id", msg.MessageID), slog.Int("attempt", msg.DeliveryAttempt))

	ev, err := s.toEvent(ctx, msg)
	ctx, span := s.receiveSpan(ctx, msg, ev)
	defer span.End()
	if err == nil {
		log = log.With(slog.String("event_id", ev.ID()), slog.String("event_type", ev.Type()))
		dctx, cancel := context.WithTimeout(ctx, s.p.HandlerTimeout)
		err = s.deliver(dctx, *ev)
		cancel()
	}
	result := s.settle(ctx, log, c, msg, ev, err)
	span.SetAttributes(attribute.String("aivedio.delivery_result", result))
	telemetry.SpanError(span, err)
	s.p.Metrics.deliveries.WithLabelValues(s.p.Group.Name, result).Inc()
	s.p.Metrics.latency.WithLabelValues(s.p.Group.Name, result).Observe(time.Since(start).Seconds())
	return result
}

// receiveSpan starts the consumer span of one received message, a child
// of the relay's publish span the message carries, and before it a span
// of the time the message waited in the broker (its delay, and its
// earlier attempts' backoff), so that a delayed hop shows its wait.
func (s *Source) receiveSpan(ctx context.Context, msg *mq.Received, ev *event.Event) (context.Context, trace.Span) {
	if ev != nil {
		tp, _ := ev.Extensions()[envelope.ExtTraceParent].(string)
		ts, _ := ev.Extensions()[envelope.ExtTraceState].(string)
		ctx = telemetry.WithTraceParent(ctx, tp, ts)
	}
	attrs := []attribute.KeyValue{
		semconv.MessagingSystemRocketMQ,
		semconv.MessagingDestinationName(msg.Topic),
		semconv.MessagingConsumerGroupName(s.p.Group.Name),
		semconv.MessagingMessageID(msg.MessageID),
		attribute.Int("aivedio.delivery_attempt", msg.DeliveryAttempt),
	}
	if ev != nil {
		attrs = append(attrs, attribute.String("cloudevents.event_id", ev.ID()), attribute.String("cloudevents.event_type", ev.Type()))
	}
	now := time.Now()
	if !msg.BornAt.IsZero() && msg.BornAt.Before(now) {
		waitAttrs := append(slices.Clip(attrs), attribute.Float64("aivedio.broker_wait_seconds", now.Sub(msg.BornAt).Seconds()))
		if !msg.DeliveryTime.IsZero() {
			waitAttrs = append(waitAttrs, attribute.String("aivedio.deliver_at", msg.DeliveryTime.Format(time.RFC3339Nano)))
		}
		_, wait := telemetry.Tracer().Start(ctx, "wait "+msg.Topic, trace.WithTimestamp(msg.BornAt), trace.WithAttributes(waitAttrs...))
		wait.End(trace.WithTimestamp(now))
	}
	return telemetry.Tracer().Start(ctx, "receive "+msg.Topic, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(append(attrs, semconv.MessagingOperationTypeReceive)...))
}

// deliver hands ev to the function in a client span that becomes the
// event's traceparent, so the function's span is its child.
func (s *Source) deliver(ctx context.Context, ev event.Event) error {
	ctx, span := telemetry.Tracer().Start(ctx, "deliver "+s.p.Group.Name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.MessagingConsumerGroupName(s.p.Group.Name), semconv.MessagingOperationTypeProcess))
	defer span.End()
	if tp, ts := telemetry.TraceParent(ctx); tp != "" {
		ev = ev.Clone()
		ev.SetExtension(envelope.ExtTraceParent, tp)
		if ts != "" {
			ev.SetExtension(envelope.ExtTraceState, ts)
		}
	}
	err := s.p.Deliverer.Deliver(ctx, ev)
	telemetry.SpanError(span, err)
	return err
}

// toEvent reads the message as a CloudEvent with a valid envelope; what
// cannot be read is poison.
func (s *Source) toEvent(ctx context.Context, msg *mq.Received) (*event.Event, error) {
	ev, err := binding.ToEvent(ctx, cerocketmq.NewMessage(msg, nil))
	if err != nil {
		return nil, outcome.Permanent("not_cloudevent", fmt.Errorf("message is not a readable cloudevent: %w", err))
	}
	if _, err := envelope.FromCloudEvent(*ev); err != nil {
		class, _ := envelope.ClassOf(err)
		return ev, outcome.Permanent("envelope."+string(class), err)
	}
	return ev, nil
}

// Results of one delivery, as counted in metrics.
const (
	resultAcked       = "acked"
	resultQuarantined = "quarantined"
	resultRetry       = "retry"
	resultAbandoned   = "abandoned"
	resultHandedBack  = "handed_back" // not handled: an earlier message of its FIFO group was not settled, or it came as the source stopped
)

// settle ACKs, quarantines or hands the message back, and says which.
func (s *Source) settle(ctx context.Context, log *slog.Logger, c mq.Consumer, msg *mq.Received, ev *event.Event, err error) string {
	// Settlement must happen even while the work context is being canceled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case err == nil:
		if ackErr := c.Ack(sctx, msg); ackErr != nil {
			// The effect is committed. The message comes back, or already
			// came back if its receipt expired during a slow delivery, and
			// the inbox answers that delivery as a duplicate.
			log.WarnContext(ctx, "ack failed; the message is or was redelivered, and the inbox absorbs it as a duplicate", slog.String("error", ackErr.Error()))
		}
		if msg.DeliveryAttempt > 1 {
			s.forgetFailures(sctx, log, msg)
		}
		return resultAcked
	case ctx.Err() != nil:
		// Abandoned at stop: no ACK, the broker redelivers after the invisible time.
		return resultAbandoned
	case outcome.IsPermanent(err):
		if qerr := s.quarantine(sctx, msg, ev, err); qerr != nil {
			log.ErrorContext(ctx, "quarantine failed; the message goes back to the broker", slog.String("error", qerr.Error()))
			s.retry(sctx, log, c, msg)
			return resultRetry
		}
		_, code := outcome.Of(err)
		log.WarnContext(ctx, "message quarantined", slog.String("error_code", code), slog.String("error", err.Error()))
		if ackErr := c.Ack(sctx, msg); ackErr != nil {
			log.WarnContext(ctx, "ack after quarantine failed; the redelivery will find the quarantine row", slog.String("error", ackErr.Error()))
		}
		return resultQuarantined
	default:
		delay := s.p.RetryDelay(msg.DeliveryAttempt)
		if d, ok := outcome.RetryAfterOf(err); ok {
			delay = min(max(d, minRetryAfter), maxRetryAfter)
		}
		log.WarnContext(ctx, "delivery failed; retrying later", slog.String("error", err.Error()), slog.Duration("retry_in", delay))
		s.recordFailure(sctx, log, msg, ev, err)
		s.retryIn(sctx, log, c, msg, delay)
		return resultRetry
	}
}

// failureRecordTimeout bounds writing or dropping a failure record.
const failureRecordTimeout = 2 * time.Second

// recordFailure keeps the handler's error of a delivery that will be
// retried, so that if the broker gives up on the message and moves it to
// the dead-letter topic, its quarantine row says why. It is written before
// the message goes back to the broker, which moves it only after that.
// Failing to record costs only the explanation: the retry goes ahead.
func (s *Source) recordFailure(ctx context.Context, log *slog.Logger, msg *mq.Received, ev *event.Event, cause error) {
	// Its own short budget: when the database is what fails, the record
	// must not use up the settle budget the retry after it needs.
	ctx, cancel := context.WithTimeout(ctx, failureRecordTimeout)
	defer cancel()
	_, code := outcome.Of(cause)
	f := quarantine.Failure{Consumer: s.p.Group.Name, MessageID: msg.MessageID, Code: code, Detail: cause.Error()}
	if ev != nil {
		f.EventID = ev.ID()
	}
	if err := quarantine.RecordFailure(ctx, s.p.Quarantine, f); err != nil {
		log.WarnContext(ctx, "could not record the failed delivery; a dead letter would not say why", slog.String("error", err.Error()))
	}
}

// forgetFailures drops the failure record of a redelivered message that
// was settled after all.
func (s *Source) forgetFailures(ctx context.Context, log *slog.Logger, msg *mq.Received) {
	ctx, cancel := context.WithTimeout(ctx, failureRecordTimeout)
	defer cancel()
	if err := quarantine.ForgetFailure(ctx, s.p.Quarantine, s.p.Group.Name, msg.MessageID); err != nil {
		log.WarnContext(ctx, "could not drop the failure record of a settled message; the reconciler prunes it", slog.String("error", err.Error()))
	}
}

// The bounds of the wait a function asks for ([outcome.RetryAfter]): not
// a busy loop, and not longer than the adapter's own longest backoff.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 10 * time.Minute
)

func (s *Source) retry(ctx context.Context, log *slog.Logger, c mq.Consumer, msg *mq.Received) {
	s.retryIn(ctx, log, c, msg, s.p.RetryDelay(msg.DeliveryAttempt))
}

// retryIn hands msg back to the broker, to come again after d.
func (s *Source) retryIn(ctx context.Context, log *slog.Logger, c mq.Consumer, msg *mq.Received, d time.Duration) {
	if err := c.ChangeInvisibleDuration(ctx, msg, d); err != nil {
		// The receive invisible duration still runs out, so the message returns anyway.
		log.WarnContext(ctx, "change invisible duration failed", slog.String("error", err.Error()))
	}
}

func (s *Source) quarantine(ctx context.Context, msg *mq.Received, ev *event.Event, cause error) error {
	_, code := outcome.Of(cause)
	entry := quarantine.Entry{
		Consumer:        s.p.Group.Name,
		MessageID:       msg.MessageID,
		Topic:           msg.Topic,
		Tag:             msg.Tag,
		ErrorClass:      string(outcome.ClassPermanent),
		ErrorCode:       code,
		ErrorDetail:     cause.Error(),
		DeliveryAttempt: msg.DeliveryAttempt,
		Keys:            msg.Keys,
		Properties:      msg.Properties,
		Body:            msg.Body,
		Source:          quarantine.SourceAdapter,
	}
	if ev != nil {
		entry.EventID = ev.ID()
	}
	written, err := quarantine.Write(ctx, s.p.Quarantine, entry)
	if err != nil {
		return err
	}
	if written {
		s.p.Metrics.quarantined.WithLabelValues(s.p.Group.Name, code).Inc()
	}
	return nil
}
