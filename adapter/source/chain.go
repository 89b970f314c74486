package source

import (
	"context"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
)

// A message is handled by a chain of small handlers, each one concern,
// composed once in [New]: every step calls the next, and may act on what
// the chain decided on the way back. The chain's answer is one [verdict],
// which the settle step carries out, once, through the message's Finish.
//
// handler decides what becomes of one delivery attempt.
type handler func(ctx context.Context, a *attempt) verdict

// middleware wraps a handler with one concern.
type middleware func(next handler) handler

// compose composes steps around last; the first step is the outermost.
func compose(last handler, steps ...middleware) handler {
	h := last
	for i := len(steps) - 1; i >= 0; i-- {
		h = steps[i](h)
	}
	return h
}

// steps is the delivery path, outermost first. Order matters where a step
// needs another's work: trace needs the decoded event for its parent;
// settle runs after quarantine and the failure record, so the broker
// moves nothing before they are written; classify sits under them, and
// above the handler timeout, whose expiry is a retry and not a stop.
func (s *Source) steps() []middleware {
	return []middleware{
		s.observe,    // in-flight gauge; count and time by result
		decode,       // read the CloudEvent and its envelope
		s.trace,      // receive span, child of the publisher's
		s.settle,     // carry the verdict out, once, through Finish
		s.quarantine, // record poison before its ACK
		s.records,    // keep or drop the failure record a dead letter explains itself with
		s.classify,   // delivery error -> ack, quarantine, retry (with its delay) or abandon
		reject,       // poison is never delivered
		s.timeout,    // bound one delivery
	}
}

// attempt is one delivery attempt of one received message, as the chain
// sees it. It belongs to the goroutine handling the message.
type attempt struct {
	msg *mq.Received
	// m is msg as a binding.Message; its Finish settles msg (see
	// [Source.finish]).
	m *cerocketmq.Message
	// ev is what decode could read: nil when msg is no CloudEvent, set
	// with an invalid envelope too (its id still names the quarantine row).
	ev *event.Event
	// invalid says why msg is poison; nil for a valid event.
	invalid error

	base, log *slog.Logger // log: base with the message's attributes, made on first use
}

// logger is the attempt's logger, with its message's attributes (and its
// event's, once valid). It is made on first use: the success path logs
// nothing and pays nothing for it.
func (a *attempt) logger() *slog.Logger {
	if a.log == nil {
		attrs := make([]any, 0, 5)
		attrs = append(attrs, slog.String("message_id", a.msg.MessageID), slog.Int("attempt", a.msg.DeliveryAttempt))
		if a.ev != nil && a.invalid == nil {
			attrs = append(attrs, slog.String("event_id", a.ev.ID()), slog.String("event_type", a.ev.Type()))
		}
		a.log = a.base.With(attrs...)
	}
	return a.log
}

// action is what becomes of a message.
type action uint8

const (
	// actAck settles the message for good: its effect is committed. It is
	// the zero value, so a step's verdict without an error is an ACK.
	actAck        action = iota
	actQuarantine        // poison, recorded in message_quarantine: ACK
	actRetry             // back to the broker, visible again after the verdict's delay
	actAbandon           // the source is stopping: left unsettled, the broker redelivers it after its invisible time
)

// verdict is what the chain decided for one message.
type verdict struct {
	action action
	delay  time.Duration // actRetry: how long the message stays invisible
	err    error         // the delivery's error (for the span and logs); nil on success
}

// result is the verdict as counted in metrics.
func (v verdict) result() result {
	switch v.action {
	case actQuarantine:
		return resultQuarantined
	case actRetry:
		return resultRetry
	case actAbandon:
		return resultAbandoned
	}
	return resultAcked
}

// retryIn is a Finish result: not ACKed, visible again after the duration.
type retryIn time.Duration

func (r retryIn) Error() string { return "retry in " + time.Duration(r).String() }

// settleTimeout bounds one settlement with the broker.
const settleTimeout = 10 * time.Second

// finish settles msg with c as result says, in the way of sdk-go's
// Finish: an ACK (nil) is final; retryIn hands it back for that long; any
// other result hands it back with the group's backoff. It is the one place
// the adapter settles a message: every received message passes here once
// (abandoned ones excepted), through its [cerocketmq.Message] when handled.
// Settlement outlives the work context's cancellation.
func (s *Source) finish(ctx context.Context, c mq.Consumer, msg *mq.Received, result error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if protocol.IsACK(result) {
		return c.Ack(ctx, msg)
	}
	d, ok := result.(retryIn)
	if !ok {
		d = retryIn(s.p.RetryDelay(msg.DeliveryAttempt))
	}
	return c.ChangeInvisibleDuration(ctx, msg, time.Duration(d))
}

// handle runs one received message through the chain; the verdict is
// settled by then.
func (s *Source) handle(ctx context.Context, c mq.Consumer, msg *mq.Received) verdict {
	a := &attempt{msg: msg, base: s.log}
	a.m = cerocketmq.NewMessage(msg, func(result error) error { return s.finish(ctx, c, msg, result) })
	return s.chain(ctx, a)
}
