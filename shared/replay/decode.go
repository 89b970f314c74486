package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"

	"github.com/aivedio/pipeline/shared/envelope"
)

// A quarantine row keeps the broker message whole: its properties and body
// as the CloudEvents RocketMQ binding (adapter/cerocketmq) wrote them. This
// file reads them back with the same mapping; shared/ may not import the
// adapter, and the binding's Message wants a live broker message.
const (
	propertyPrefix        = "CE_"
	propertyContentType   = propertyPrefix + "datacontenttype"
	propertySpecVersion   = propertyPrefix + "specversion"
	propertyType          = propertyPrefix + "type"
	propertySubject       = propertyPrefix + "subject"
	contentTypeStructured = "application/cloudevents+json"
)

var specs = spec.WithPrefix(propertyPrefix)

// errNotCloudEvent: neither binary-mode properties nor a structured body.
var errNotCloudEvent = errors.New("the message is not a CloudEvent (no CE_specversion property and no structured content type)")

// decodeEnvelope reads the envelope a quarantined message carries, and
// validates it as a stage would.
func decodeEnvelope(props map[string]string, body []byte) (envelope.Envelope, error) {
	m := newStoredMessage(props, body)
	if m.encoding == binding.EncodingUnknown {
		return envelope.Envelope{}, errNotCloudEvent
	}
	ev, err := binding.ToEvent(context.Background(), m)
	if err != nil {
		return envelope.Envelope{}, fmt.Errorf("read cloudevent: %w", err)
	}
	return envelope.FromCloudEvent(*ev)
}

// storedMessage is a quarantined message as a binding.MessageReader.
type storedMessage struct {
	props    map[string]string
	body     []byte
	version  spec.Version
	encoding binding.Encoding
}

var _ binding.MessageMetadataReader = (*storedMessage)(nil)

func newStoredMessage(props map[string]string, body []byte) *storedMessage {
	m := &storedMessage{props: props, body: body, encoding: binding.EncodingUnknown}
	switch ct := props[propertyContentType]; {
	case strings.HasPrefix(ct, contentTypeStructured):
		m.encoding = binding.EncodingStructured
	case props[propertySpecVersion] != "":
		if v := specs.Version(props[propertySpecVersion]); v != nil {
			m.version = v
			m.encoding = binding.EncodingBinary
		}
	}
	return m
}

func (m *storedMessage) ReadEncoding() binding.Encoding { return m.encoding }

func (m *storedMessage) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if m.encoding != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.JSON, bytes.NewReader(m.body))
}

func (m *storedMessage) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if m.encoding != binding.EncodingBinary {
		return binding.ErrNotBinary
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	for key, value := range m.props {
		if !strings.HasPrefix(key, propertyPrefix) {
			continue
		}
		if attr := m.version.Attribute(key); attr != nil {
			if err := w.SetAttribute(attr, value); err != nil {
				return fmt.Errorf("attribute %s: %w", attr.Name(), err)
			}
			continue
		}
		if err := w.SetExtension(strings.ToLower(strings.TrimPrefix(key, propertyPrefix)), value); err != nil {
			return fmt.Errorf("extension %s: %w", key, err)
		}
	}
	if len(m.body) > 0 {
		if err := w.SetData(bytes.NewReader(m.body)); err != nil {
			return err
		}
	}
	return w.End(ctx)
}

// GetAttribute reads one attribute of a binary-mode message.
func (m *storedMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	if m.version == nil {
		return nil, nil
	}
	attr := m.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	if v, ok := m.props[attr.PrefixedName()]; ok {
		return attr, v
	}
	return attr, nil
}

// GetExtension reads one extension of a binary-mode message.
func (m *storedMessage) GetExtension(name string) any {
	if v, ok := m.props[propertyPrefix+name]; ok {
		return v
	}
	return nil
}

// eventView is the report's view of an envelope.
func eventView(e envelope.Envelope) *Event {
	return &Event{
		EventID: e.EventID, EventType: e.EventType, SchemaVersion: e.SchemaVersion, Producer: e.Producer,
		OccurredAt: e.OccurredAt, AggregateType: e.AggregateType, AggregateID: e.AggregateID, TenantID: e.TenantID,
		TraceID: e.TraceID, CorrelationID: e.CorrelationID, CausationID: e.CausationID, Payload: e.Payload,
	}
}
