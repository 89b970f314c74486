package cerocketmq

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/format"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/types"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/ceprops"
)

type ctxKey int

const (
	topicKey ctxKey = iota
	tagKey
	groupKey
	deliveryKey
)

// WithTopic names the broker topic to send to, overriding the Sender's.
func WithTopic(ctx context.Context, topic string) context.Context {
	return context.WithValue(ctx, topicKey, topic)
}

// WithTag sets the message tag; without it the tag is the event type.
func WithTag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, tagKey, tag)
}

// WithMessageGroup sets the FIFO message group (docs/design.md: the aggregate id).
func WithMessageGroup(ctx context.Context, group string) context.Context {
	return context.WithValue(ctx, groupKey, group)
}

// WithDeliveryTime delays delivery until at, on a DELAY topic.
func WithDeliveryTime(ctx context.Context, at time.Time) context.Context {
	return context.WithValue(ctx, deliveryKey, at)
}

// WriteMessage fills out from m: properties and body in m's encoding (binary
// unless the context or m prefers structured), keys, tag, message group and
// delivery time. out.Topic is set from [WithTopic] when present.
func WriteMessage(ctx context.Context, m binding.MessageReader, out *mq.Message, transformers ...binding.Transformer) error {
	w := &messageWriter{out: out}
	if out.Properties == nil {
		out.Properties = map[string]string{}
	}
	if _, err := binding.Write(ctx, m, w, w, transformers...); err != nil {
		return fmt.Errorf("write cloudevent to rocketmq message: %w", err)
	}
	if w.id == "" {
		return errors.New("write cloudevent to rocketmq message: event has no id")
	}
	out.Keys = []string{w.id}
	out.Tag = w.eventType
	if topic, ok := ctx.Value(topicKey).(string); ok {
		out.Topic = topic
	}
	if tag, ok := ctx.Value(tagKey).(string); ok {
		out.Tag = tag
	}
	if group, ok := ctx.Value(groupKey).(string); ok {
		out.MessageGroup = group
	}
	if at, ok := ctx.Value(deliveryKey).(time.Time); ok {
		out.DeliveryTime = at
	}
	return nil
}

// messageWriter is both a binding.BinaryWriter and a binding.StructuredWriter.
type messageWriter struct {
	out       *mq.Message
	id        string
	eventType string
}

var (
	_ binding.BinaryWriter     = (*messageWriter)(nil)
	_ binding.StructuredWriter = (*messageWriter)(nil)
)

func (w *messageWriter) SetStructuredEvent(ctx context.Context, f format.Format, event io.Reader) error {
	if f != format.JSON {
		return fmt.Errorf("structured format %s is not supported (only %s)", f.MediaType(), ceprops.ContentTypeStructured)
	}
	body, err := io.ReadAll(event)
	if err != nil {
		return err
	}
	// The id and type feed the message keys and tag.
	var e struct {
		ID   string `json:"id"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(body, &e); err != nil {
		return fmt.Errorf("structured event is not JSON: %w", err)
	}
	w.id, w.eventType = e.ID, e.Type
	w.out.Properties[ceprops.ContentType] = ceprops.ContentTypeStructured
	w.out.Body = body
	return nil
}

func (w *messageWriter) Start(ctx context.Context) error { return nil }
func (w *messageWriter) End(ctx context.Context) error   { return nil }

func (w *messageWriter) SetAttribute(attribute spec.Attribute, value any) error {
	key := ceprops.Prefix + attribute.Name()
	if value == nil {
		delete(w.out.Properties, key)
		return nil
	}
	s, err := types.Format(value)
	if err != nil {
		return fmt.Errorf("attribute %s: %w", attribute.Name(), err)
	}
	switch attribute.Kind() {
	case spec.ID:
		w.id = s
	case spec.Type:
		w.eventType = s
	}
	w.out.Properties[key] = s
	return nil
}

func (w *messageWriter) SetExtension(name string, value any) error {
	key := ceprops.Prefix + name
	if value == nil {
		delete(w.out.Properties, key)
		return nil
	}
	s, err := types.Format(value)
	if err != nil {
		return fmt.Errorf("extension %s: %w", name, err)
	}
	w.out.Properties[key] = s
	return nil
}

func (w *messageWriter) SetData(data io.Reader) error {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(data); err != nil {
		return err
	}
	w.out.Body = buf.Bytes()
	return nil
}
