package cerocketmq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/protocol"

	"github.com/aivedio/pipeline/adapter/mq"
)

// ErrNotCloudEvent is returned when a received message carries neither a
// structured event nor binary-mode properties: it can never become an event,
// so it is poison, not a retryable failure.
var ErrNotCloudEvent = errors.New("rocketmq message is not a cloudevent (no CE_specversion and no structured content type)")

// Message is a received RocketMQ message as a binding.Message.
type Message struct {
	// Received is the broker's view: message id, delivery attempt, topic, tag.
	Received *mq.Received

	version  spec.Version
	encoding binding.Encoding
	settle   func(error) error
}

var (
	_ binding.Message               = (*Message)(nil)
	_ binding.MessageMetadataReader = (*Message)(nil)
)

// NewMessage wraps a received message. settle is called by Finish; nil makes
// Finish a no-op (for reading a message without owning it).
func NewMessage(r *mq.Received, settle func(error) error) *Message {
	m := &Message{Received: r, settle: settle, encoding: binding.EncodingUnknown}
	switch ct := r.Properties[PropertyContentType]; {
	case strings.HasPrefix(ct, ContentTypeStructured):
		m.encoding = binding.EncodingStructured
	case r.Properties[specVersion] != "":
		if v := specs.Version(r.Properties[specVersion]); v != nil {
			m.version = v
			m.encoding = binding.EncodingBinary
		}
	}
	return m
}

// specs knows the CloudEvents versions whose attributes map to CE_ properties.
var specs = spec.WithPrefix(PropertyPrefix)

// ReadEncoding tells how the event is carried; EncodingUnknown for a message
// that is not a CloudEvent.
func (m *Message) ReadEncoding() binding.Encoding { return m.encoding }

// ReadStructured hands the body to a structured writer.
func (m *Message) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.encoding != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.JSON, bytes.NewReader(m.Received.Body))
}

// ReadBinary hands every CE_ property and the body to a binary writer.
func (m *Message) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if m.encoding != binding.EncodingBinary {
		if m.encoding == binding.EncodingUnknown {
			return ErrNotCloudEvent
		}
		return binding.ErrNotBinary
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	for key, value := range m.Received.Properties {
		if !strings.HasPrefix(key, PropertyPrefix) {
			continue
		}
		if attr := m.version.Attribute(key); attr != nil {
			if err := w.SetAttribute(attr, value); err != nil {
				return fmt.Errorf("attribute %s: %w", attr.Name(), err)
			}
			continue
		}
		if err := w.SetExtension(strings.ToLower(strings.TrimPrefix(key, PropertyPrefix)), value); err != nil {
			return fmt.Errorf("extension %s: %w", key, err)
		}
	}
	if len(m.Received.Body) > 0 {
		if err := w.SetData(bytes.NewReader(m.Received.Body)); err != nil {
			return err
		}
	}
	return w.End(ctx)
}

// GetAttribute reads one attribute of a binary-mode message.
func (m *Message) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	if m.version == nil {
		return nil, nil
	}
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if v, ok := m.Received.Properties[attr.PrefixedName()]; ok {
		return attr, v
	}
	return attr, nil
}

// GetExtension reads one extension of a binary-mode message.
func (m *Message) GetExtension(name string) any {
	if v, ok := m.Received.Properties[PropertyPrefix+name]; ok {
		return v
	}
	return nil
}

// Finish settles the message: ACK for nil or protocol.ResultACK, otherwise
// back to the broker for a later delivery.
func (m *Message) Finish(err error) error {
	if m.settle == nil {
		return nil
	}
	return m.settle(err)
}

// RetryDelayFunc says how long a message stays invisible before its next
// delivery, given the attempt that just failed (1 for the first delivery).
type RetryDelayFunc func(attempt int) time.Duration

// settleFunc ACKs on success and otherwise changes the invisible duration.
func settleFunc(c mq.Consumer, r *mq.Received, delay RetryDelayFunc, timeout time.Duration) func(error) error {
	return func(result error) error {
		// Finish has no context: the settlement gets its own bounded one.
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if protocol.IsACK(result) {
			return c.Ack(ctx, r)
		}
		return c.ChangeInvisibleDuration(ctx, r, delay(r.DeliveryAttempt))
	}
}
