package source

import (
	"context"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// The span kinds, made once: an option is an allocation each time.
var (
	consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)
	clientKind   = trace.WithSpanKind(trace.SpanKindClient)
)

// topicSpans are the names of the spans of one topic's messages.
type topicSpans struct{ wait, receive string }

// topicSpanNames names the spans of each topic the group subscribes to.
func topicSpanNames(g catalog.Group) map[string]topicSpans {
	names := make(map[string]topicSpans, len(g.Subscriptions))
	for _, sub := range g.Subscriptions {
		topic := sub.Topic.BrokerName()
		names[topic] = topicSpans{wait: "wait " + topic, receive: "receive " + topic}
	}
	return names
}

// spanNames names the spans of a message of topic.
func (s *Source) spanNames(topic string) topicSpans {
	if n, ok := s.topicSpans[topic]; ok {
		return n
	}
	return topicSpans{wait: "wait " + topic, receive: "receive " + topic}
}

// receiveSpan starts the consumer span of one received message, a child
// of the relay's publish span the message carries, and before it a span
// of the time the message waited in the broker (its delay, and its
// earlier attempts' backoff), so that a delayed hop shows its wait.
func (s *Source) receiveSpan(ctx context.Context, msg *mq.Received, ev *event.Event) (context.Context, trace.Span) {
	if ev != nil {
		ext := ev.Extensions() // a copy: once
		tp, _ := ext[envelope.ExtTraceParent].(string)
		ts, _ := ext[envelope.ExtTraceState].(string)
		ctx = telemetry.WithTraceParent(ctx, tp, ts)
	}
	// Room for every attribute the two spans add, so none reallocates.
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		semconv.MessagingSystemRocketMQ,
		semconv.MessagingDestinationName(msg.Topic),
		semconv.MessagingConsumerGroupName(s.p.Group.Name),
		semconv.MessagingMessageID(msg.MessageID),
		attribute.Int("aivedio.delivery_attempt", msg.DeliveryAttempt),
	)
	if ev != nil {
		attrs = append(attrs, attribute.String("cloudevents.event_id", ev.ID()), attribute.String("cloudevents.event_type", ev.Type()))
	}
	now := time.Now()
	if !msg.BornAt.IsZero() && msg.BornAt.Before(now) {
		waitAttrs := append(slices.Clip(attrs), attribute.Float64("aivedio.broker_wait_seconds", now.Sub(msg.BornAt).Seconds()))
		if !msg.DeliveryTime.IsZero() {
			waitAttrs = append(waitAttrs, attribute.String("aivedio.deliver_at", msg.DeliveryTime.Format(time.RFC3339Nano)))
		}
		_, wait := telemetry.Tracer().Start(ctx, s.spanNames(msg.Topic).wait, trace.WithTimestamp(msg.BornAt), trace.WithAttributes(waitAttrs...))
		wait.End(trace.WithTimestamp(now))
	}
	return telemetry.Tracer().Start(ctx, s.spanNames(msg.Topic).receive, consumerKind,
		trace.WithAttributes(append(attrs, semconv.MessagingOperationTypeReceive)...))
}

// deliver is the chain's last handler: it hands the event to the
// function in a client span that becomes the event's traceparent, so the
// function's span is its child.
func (s *Source) deliver(ctx context.Context, a *attempt) verdict {
	ctx, span := telemetry.Tracer().Start(ctx, s.deliverSpan, clientKind, s.deliverAttrs)
	defer span.End()
	if tp, ts := telemetry.TraceParent(ctx); tp != "" {
		// The attempt's event is its own, read from this message, and no
		// step reads its trace context after this: set in place, not on a
		// copy.
		a.ev.SetExtension(envelope.ExtTraceParent, tp)
		if ts != "" {
			a.ev.SetExtension(envelope.ExtTraceState, ts)
		}
	}
	err := s.p.Deliverer.Deliver(ctx, *a.ev)
	telemetry.SpanError(span, err)
	return verdict{err: err}
}
