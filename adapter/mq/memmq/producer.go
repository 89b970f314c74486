package memmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/catalog"
)

// Producer sends to a [Broker]. It is safe for concurrent use.
type Producer struct {
	b *Broker
}

var _ mq.Producer = (*Producer)(nil)

// Send stores msg and hands it to every consumer group subscribed to its
// topic. The message is stored once Send returns a message id.
func (p *Producer) Send(ctx context.Context, msg *mq.Message) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("send to %s: %w", msg.Topic, err)
	}
	b := p.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkUpLocked("send to " + msg.Topic); err != nil {
		return "", err
	}
	t, err := b.topicLocked(msg.Topic)
	if err != nil {
		return "", fmt.Errorf("send: %w", err)
	}
	now := b.now()
	if err := b.validate(t, msg, now); err != nil {
		return "", fmt.Errorf("send to %s: %w", msg.Topic, err)
	}
	b.seq++
	s := &stored{
		msg:    copyMessage(msg),
		id:     fmt.Sprintf("%s%016X", b.idPrefix, b.seq),
		bornAt: now.Truncate(time.Millisecond),
	}
	if !msg.DeliveryTime.IsZero() {
		s.msg.DeliveryTime = msg.DeliveryTime.Truncate(time.Millisecond)
	}
	if t.typ == catalog.FIFO {
		s.queue = queueOf(msg.MessageGroup, b.queues)
	}
	b.appendLocked(t, s)
	if err := b.flushLocked(); err != nil {
		return "", fmt.Errorf("send to %s: %w", msg.Topic, err)
	}
	return s.id, nil
}

// validate applies the proxy's checks: body size, and message kind against
// topic type.
func (b *Broker) validate(t *topic, msg *mq.Message, now time.Time) error {
	if len(msg.Body) == 0 {
		return errors.New("message body cannot be empty")
	}
	if len(msg.Body) > MaxBodySize {
		return fmt.Errorf("message body of %d bytes exceeds %d", len(msg.Body), MaxBodySize)
	}
	kind := catalog.Normal
	switch {
	case msg.MessageGroup != "" && !msg.DeliveryTime.IsZero():
		return fmt.Errorf("%w: a message has a message group or a delivery time, not both", ErrMessageType)
	case msg.MessageGroup != "":
		kind = catalog.FIFO
	case !msg.DeliveryTime.IsZero():
		kind = catalog.Delay
	}
	if kind != t.typ {
		return fmt.Errorf("%w: %s message on %s topic", ErrMessageType, kind, t.typ)
	}
	if kind == catalog.Delay && msg.DeliveryTime.Sub(now) > b.maxDelay {
		return fmt.Errorf("delivery time %s is more than %s ahead", msg.DeliveryTime.Format(time.RFC3339), b.maxDelay)
	}
	return nil
}
