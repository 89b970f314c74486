package dlq

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// The error class and code of every quarantine row the drainer writes.
const (
	ErrorClass = "dlq"
	ErrorCode  = "max_delivery_attempts"
)

// record writes msg's quarantine row. Writing and the ACK after it outlive a
// stop: they are bounded by WriteTimeout instead, so a row is not left
// written and its message unsettled for lack of a few milliseconds.
func (d *Drainer) record(ctx context.Context, msg *mq.Received) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.p.WriteTimeout)
	defer cancel()
	e := d.entry(wctx, msg)
	written, err := quarantine.Write(wctx, d.p.DB, e)
	if err != nil {
		return fmt.Errorf("quarantine dead letter %s of %s: %w", msg.MessageID, d.p.Group.Name, err)
	}
	log := d.p.Logger.With(slog.String("message_id", msg.MessageID), slog.String("event_id", e.EventID),
		slog.String("tag", msg.Tag), slog.Int("attempt", msg.DeliveryAttempt))
	if written {
		log.WarnContext(ctx, "dead letter quarantined")
	} else {
		log.InfoContext(ctx, "dead letter was already quarantined")
	}
	return nil
}

// entry is msg's quarantine row.
func (d *Drainer) entry(ctx context.Context, msg *mq.Received) quarantine.Entry {
	topic := msg.Topic
	if topic == "" {
		topic = d.p.Group.DLQTopic()
	}
	return quarantine.Entry{
		Consumer:   d.p.Group.Name,
		EventID:    eventID(ctx, msg),
		MessageID:  msg.MessageID,
		Topic:      topic,
		Tag:        msg.Tag,
		ErrorClass: ErrorClass,
		ErrorCode:  ErrorCode,
		ErrorDetail: fmt.Sprintf("consumer group %s did not settle the message within its %d delivery attempts; the broker moved it to %s",
			d.p.Group.Name, d.p.Group.MaxDeliveryAttempts, d.p.Group.DLQTopic()),
		DeliveryAttempt: msg.DeliveryAttempt,
		// What the broker counted before it gave up; the source adapter's
		// failure record, when there is one, says exactly.
		DeliveryCount: d.p.Group.MaxDeliveryAttempts,
		Keys:          msg.Keys,
		Properties:    msg.Properties,
		Body:          msg.Body,
		Source:        quarantine.SourceDLQ,
	}
}

// eventID reads the CloudEvent id of msg; for a binary-mode message that
// is not a valid event it falls back to its id attribute, and to "" for a
// message that is no CloudEvent at all.
func eventID(ctx context.Context, msg *mq.Received) string {
	m := cerocketmq.NewMessage(msg, nil)
	if ev, err := binding.ToEvent(ctx, m); err == nil {
		return ev.ID()
	}
	if _, v := m.GetAttribute(spec.ID); v != nil {
		if id, ok := v.(string); ok {
			return id
		}
	}
	return ""
}

// ack settles a recorded dead letter. A failed ACK loses nothing: the
// message comes back and finds its row.
func (d *Drainer) ack(ctx context.Context, c mq.Consumer, msg *mq.Received) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.p.WriteTimeout)
	defer cancel()
	if err := c.Ack(actx, msg); err != nil {
		d.p.Logger.WarnContext(ctx, "ack after quarantine failed; the redelivery will find the row",
			slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
		return
	}
	d.p.Metrics.drained.WithLabelValues(d.p.Group.Name).Inc()
}

// handBack returns unrecorded dead letters to the broker for RetryDelay.
// If that fails too they still come back, after their invisible duration.
func (d *Drainer) handBack(ctx context.Context, c mq.Consumer, msgs []*mq.Received) {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.p.WriteTimeout)
	defer cancel()
	for _, msg := range msgs {
		if err := c.ChangeInvisibleDuration(hctx, msg, d.p.RetryDelay); err != nil {
			d.p.Logger.WarnContext(ctx, "hand back dead letter failed; it returns after its invisible duration",
				slog.String("message_id", msg.MessageID), slog.String("error", err.Error()))
		}
	}
}
