package source

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// The steps of the chain, in its order (see [Source.steps]).

// observe counts the message in flight while it is handled, then counts
// and times it by its result, settlement included.
func (s *Source) observe(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		start := time.Now()
		g := s.series.group()
		g.inFlight.Inc()
		defer g.inFlight.Dec()
		v := next(ctx, a)
		r := v.result()
		s.series.count(r).Inc()
		s.series.latency(r).Observe(time.Since(start).Seconds())
		return v
	}
}

// decode reads the message as a CloudEvent with a valid envelope. What
// cannot be read is poison ([reject] keeps it from the function), but the
// steps before the delivery run on it all the same: it is traced, counted,
// quarantined and settled like any other.
func decode(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		a.ev, a.invalid = toEvent(ctx, a.m)
		return next(ctx, a)
	}
}

func toEvent(ctx context.Context, m binding.Message) (*event.Event, error) {
	ev, err := binding.ToEvent(ctx, m)
	if err != nil {
		return nil, outcome.Permanent("not_cloudevent", fmt.Errorf("message is not a readable cloudevent: %w", err))
	}
	if _, err := envelope.FromCloudEvent(*ev); err != nil {
		class, _ := envelope.ClassOf(err)
		return ev, outcome.Permanent("envelope."+string(class), err)
	}
	return ev, nil
}

// trace runs the rest of the chain in the message's receive span (see
// [Source.receiveSpan]), and records there what became of it.
func (s *Source) trace(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		ctx, span := s.receiveSpan(ctx, a.msg, a.ev)
		defer span.End()
		v := next(ctx, a)
		span.SetAttributes(resultAttrs[v.result()]...)
		telemetry.SpanError(span, v.err)
		return v
	}
}

// resultAttrs are the span attribute of each result, made once.
var resultAttrs = func() (attrs [nResults][]attribute.KeyValue) {
	for r := range nResults {
		attrs[r] = []attribute.KeyValue{attribute.String("aivedio.delivery_result", r.String())}
	}
	return attrs
}()

// settle carries the verdict out through the message's Finish: the one
// settlement of a handled message. An abandoned message is left alone.
func (s *Source) settle(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		v := next(ctx, a)
		var result error
		switch v.action {
		case actAbandon:
			return v
		case actRetry:
			result = retryIn(v.delay)
		}
		if err := a.m.Finish(result); err != nil {
			switch v.action {
			case actAck:
				// The effect is committed. The message comes back, or
				// already came back if its receipt expired during a slow
				// delivery, and the inbox answers that delivery as a
				// duplicate.
				a.logger().WarnContext(ctx, "ack failed; the message is or was redelivered, and the inbox absorbs it as a duplicate", slog.String("error", err.Error()))
			case actQuarantine:
				a.logger().WarnContext(ctx, "ack after quarantine failed; the redelivery will find the quarantine row", slog.String("error", err.Error()))
			default:
				// The receive invisible duration still runs out, so the message returns anyway.
				a.logger().WarnContext(ctx, "change invisible duration failed", slog.String("error", err.Error()))
			}
		}
		return v
	}
}

// quarantine records poison in message_quarantine before it is ACKed.
// When the record cannot be written the message goes back to the broker
// instead: an ACK then would lose it.
func (s *Source) quarantine(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		v := next(ctx, a)
		if v.action != actQuarantine {
			return v
		}
		if err := s.writeQuarantine(ctx, a, v.err); err != nil {
			a.logger().ErrorContext(ctx, "quarantine failed; the message goes back to the broker", slog.String("error", err.Error()))
			return verdict{action: actRetry, delay: s.p.RetryDelay(a.msg.DeliveryAttempt), err: v.err}
		}
		_, code := outcome.Of(v.err)
		a.logger().WarnContext(ctx, "message quarantined", slog.String("error_code", code), slog.String("error", v.err.Error()))
		return v
	}
}

// records keeps the error of a delivery that will be retried, so that a
// dead letter says why (see [Source.recordFailure]), and drops it once a
// redelivery succeeds.
func (s *Source) records(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		v := next(ctx, a)
		switch {
		case v.action == actRetry:
			s.recordFailure(ctx, a, v.err)
		case v.action == actAck && a.msg.DeliveryAttempt > 1:
			s.forgetFailures(ctx, a)
		}
		return v
	}
}

// classify turns the delivery's error into an action (docs/design.md §6):
// none is an ACK; any, once the source is stopping, abandons the message;
// a permanent one is poison; anything else is retried after the group's
// backoff, or the wait the function asked for ([outcome.RetryAfter]).
func (s *Source) classify(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		v := next(ctx, a)
		switch {
		case v.err == nil:
		case ctx.Err() != nil:
			v.action = actAbandon
		case outcome.IsPermanent(v.err):
			v.action = actQuarantine
		default:
			v.action, v.delay = actRetry, s.p.RetryDelay(a.msg.DeliveryAttempt)
			if d, ok := outcome.RetryAfterOf(v.err); ok {
				v.delay = min(max(d, minRetryAfter), maxRetryAfter)
			}
			a.logger().WarnContext(ctx, "delivery failed; retrying later", slog.String("error", v.err.Error()), slog.Duration("retry_in", v.delay))
		}
		return v
	}
}

// The bounds of the wait a function asks for ([outcome.RetryAfter]): not
// a busy loop, and not longer than the adapter's own longest backoff.
const (
	minRetryAfter = time.Second
	maxRetryAfter = 10 * time.Minute
)

// reject answers poison with why it is poison, without delivering it.
func reject(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		if a.invalid != nil {
			return verdict{err: a.invalid}
		}
		return next(ctx, a)
	}
}

// timeout bounds one delivery by the handler timeout.
func (s *Source) timeout(next handler) handler {
	return func(ctx context.Context, a *attempt) verdict {
		ctx, cancel := context.WithTimeout(ctx, s.p.HandlerTimeout)
		defer cancel()
		return next(ctx, a)
	}
}
