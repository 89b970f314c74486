package cerocketmq

import (
	"github.com/cloudevents/sdk-go/v2/binding"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/ceprops"
)

// Message is a received RocketMQ message as a binding.Message. Its
// properties and body are read with the mapping of shared/ceprops; one that
// is no CloudEvent fails to read with ceprops.ErrNotCloudEvent.
type Message struct {
	*ceprops.Reader
	// Received is the broker's view: message id, delivery attempt, topic, tag.
	Received *mq.Received

	settle func(error) error
}

var (
	_ binding.Message               = (*Message)(nil)
	_ binding.MessageMetadataReader = (*Message)(nil)
)

// NewMessage wraps a received message. settle is called by Finish; nil makes
// Finish a no-op (for reading a message without owning it).
func NewMessage(r *mq.Received, settle func(error) error) *Message {
	return &Message{Reader: ceprops.NewReader(r.Properties, r.Body), Received: r, settle: settle}
}

// Finish settles the message by calling the settle function it was made
// with; the caller decides there what an ACK or a NACK does.
func (m *Message) Finish(err error) error {
	if m.settle == nil {
		return nil
	}
	return m.settle(err)
}
