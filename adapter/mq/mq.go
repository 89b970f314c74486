// Package mq is the broker seen from the adapter: a small interface over
// RocketMQ 5's producer and simple consumer, so that the CloudEvents binding,
// the relay and the source adapter run unchanged on the real broker (package
// mq/rocketmq) and on the in-process emulator of `go run ./local`.
//
// # Delivery guarantee
//
// Delivery is at least once. A received message stays invisible to its
// consumer group for the invisible duration given to Receive; unless it is
// acknowledged with Ack before then, the broker delivers it again with a
// higher DeliveryAttempt, until the group's maximum delivery attempts move it
// to the group's dead-letter topic. Nothing here deduplicates: consumers do
// that with the inbox.
package mq

import (
	"context"
	"errors"
	"time"
)

// Message is a message to publish.
type Message struct {
	Topic string // broker topic name (catalog.BrokerName)
	Tag   string // one tag; consumer groups filter on it
	Keys  []string
	// MessageGroup orders messages on a FIFO topic; empty elsewhere.
	MessageGroup string
	// DeliveryTime delays delivery on a DELAY topic; zero elsewhere.
	DeliveryTime time.Time
	Properties   map[string]string
	Body         []byte
}

// Received is a message handed to a consumer group.
type Received struct {
	Message
	MessageID string
	// DeliveryAttempt is 1 on first delivery and grows with each redelivery.
	DeliveryAttempt int
	BornAt          time.Time
	// Handle belongs to the Consumer that returned the message; it is what
	// Ack and ChangeInvisibleDuration act on.
	Handle any
}

// Producer publishes messages.
type Producer interface {
	// Send publishes synchronously and returns the broker's message id once
	// the broker has stored the message.
	Send(ctx context.Context, msg *Message) (messageID string, err error)
}

// Consumer receives the messages of one consumer group.
type Consumer interface {
	// Receive waits up to the consumer's await duration for at most max
	// messages, each invisible to the group for invisible.
	Receive(ctx context.Context, max int, invisible time.Duration) ([]*Received, error)
	// Ack settles a message for good.
	Ack(ctx context.Context, msg *Received) error
	// ChangeInvisibleDuration makes the message visible again after d: the
	// broker redelivers it then, counting one more attempt.
	ChangeInvisibleDuration(ctx context.Context, msg *Received, d time.Duration) error
}

// Access errors: the adapters wrap the broker's refusals in these, so that
// callers can tell a wrong credential or a missing permission (which no
// retry cures until an operator acts) from an outage.
var (
	// ErrUnauthenticated: the broker did not accept the credentials.
	ErrUnauthenticated = errors.New("the broker refused the credentials: check ROCKETMQ_ACCESS_KEY and ROCKETMQ_SECRET_KEY")
	// ErrForbidden: the credentials' user lacks a permission on a topic or group.
	ErrForbidden = errors.New("the broker's ACL forbids this user the operation: grant it (docs/messaging.md, RocketMQ ACL)")
)
