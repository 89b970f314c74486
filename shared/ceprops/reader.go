package ceprops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
)

// Property names of the mapping.
const (
	// Prefix starts every CloudEvents property.
	Prefix = "CE_"
	// ContentType is the single content-type property of both modes.
	ContentType = Prefix + "datacontenttype"
	// SpecVersion tells a binary-mode message and its CloudEvents version.
	SpecVersion = Prefix + "specversion"
	// ContentTypeStructured marks a structured-mode message.
	ContentTypeStructured = "application/cloudevents+json"
)

// ErrNotCloudEvent: the message carries neither a structured event nor
// binary-mode properties.
var ErrNotCloudEvent = errors.New("the message is not a CloudEvent (no CE_specversion property and no structured content type)")

// specs knows the CloudEvents versions whose attributes map to CE_ properties.
var specs = spec.WithPrefix(Prefix)

// Reader is a message's properties and body as a binding.MessageReader.
// It only reads: settling a live message is the transport's business.
type Reader struct {
	props    map[string]string
	body     []byte
	version  spec.Version
	encoding binding.Encoding
}

var _ binding.MessageMetadataReader = (*Reader)(nil)

// NewReader reads the event that props and body carry.
func NewReader(props map[string]string, body []byte) *Reader {
	r := &Reader{props: props, body: body, encoding: binding.EncodingUnknown}
	switch ct := props[ContentType]; {
	case strings.HasPrefix(ct, ContentTypeStructured):
		r.encoding = binding.EncodingStructured
	case props[SpecVersion] != "":
		if v := specs.Version(props[SpecVersion]); v != nil {
			r.version = v
			r.encoding = binding.EncodingBinary
		}
	}
	return r
}

// ToEvent reads the event that props and body carry. It does not validate
// the event beyond what the CloudEvents SDK does while reading.
func ToEvent(props map[string]string, body []byte) (*event.Event, error) {
	r := NewReader(props, body)
	if r.encoding == binding.EncodingUnknown {
		return nil, ErrNotCloudEvent
	}
	ev, err := binding.ToEvent(context.Background(), r)
	if err != nil {
		return nil, fmt.Errorf("read cloudevent: %w", err)
	}
	return ev, nil
}

// ReadEncoding tells how the event is carried; EncodingUnknown for a
// message that is not a CloudEvent.
func (r *Reader) ReadEncoding() binding.Encoding { return r.encoding }

// ReadStructured hands the body to a structured writer.
func (r *Reader) ReadStructured(ctx context.Context, w binding.StructuredWriter) error {
	if r.encoding != binding.EncodingStructured {
		return binding.ErrNotStructured
	}
	return w.SetStructuredEvent(ctx, format.JSON, bytes.NewReader(r.body))
}

// ReadBinary hands every CE_ property and the body to a binary writer.
func (r *Reader) ReadBinary(ctx context.Context, w binding.BinaryWriter) error {
	if r.encoding != binding.EncodingBinary {
		if r.encoding == binding.EncodingUnknown {
			return ErrNotCloudEvent
		}
		return binding.ErrNotBinary
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	for key, value := range r.props {
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		if attr := r.version.Attribute(key); attr != nil {
			if err := w.SetAttribute(attr, value); err != nil {
				return fmt.Errorf("attribute %s: %w", attr.Name(), err)
			}
			continue
		}
		if err := w.SetExtension(strings.ToLower(strings.TrimPrefix(key, Prefix)), value); err != nil {
			return fmt.Errorf("extension %s: %w", key, err)
		}
	}
	if len(r.body) > 0 {
		if err := w.SetData(bytes.NewReader(r.body)); err != nil {
			return err
		}
	}
	return w.End(ctx)
}

// GetAttribute reads one attribute of a binary-mode message.
func (r *Reader) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	if r.version == nil {
		return nil, nil
	}
	attr := r.version.AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	// Not attr.PrefixedName(): the SDK lower-cases it ("ce_id"), and the
	// properties are written as Prefix + name ("CE_id").
	if v, ok := r.props[Prefix+attr.Name()]; ok {
		return attr, v
	}
	return attr, nil
}

// GetExtension reads one extension of a binary-mode message.
func (r *Reader) GetExtension(name string) any {
	if v, ok := r.props[Prefix+name]; ok {
		return v
	}
	return nil
}
