package cerocketmq

import (
	"context"
	"errors"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/protocol"

	"github.com/aivedio/pipeline/adapter/mq"
)

// Sender is a protocol.Sender that publishes CloudEvents to RocketMQ.
type Sender struct {
	producer mq.Producer
	topic    string
}

var _ protocol.Sender = (*Sender)(nil)

// NewSender sends to topic (a broker topic name) unless the context names
// another with [WithTopic].
func NewSender(producer mq.Producer, topic string) *Sender {
	return &Sender{producer: producer, topic: topic}
}

// Send publishes m and finishes it with the outcome.
func (s *Sender) Send(ctx context.Context, m binding.Message, transformers ...binding.Transformer) (err error) {
	defer func() { _ = m.Finish(err) }()
	_, err = s.SendMessage(ctx, m, transformers...)
	return err
}

// SendMessage publishes m and returns the broker's message id. It does not
// finish m.
func (s *Sender) SendMessage(ctx context.Context, m binding.MessageReader, transformers ...binding.Transformer) (string, error) {
	out := &mq.Message{Topic: s.topic}
	if err := WriteMessage(ctx, m, out, transformers...); err != nil {
		return "", err
	}
	if out.Topic == "" {
		return "", errors.New("send cloudevent: no topic (give NewSender one or use WithTopic)")
	}
	return s.producer.Send(ctx, out)
}
