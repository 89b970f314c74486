package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// ErrNoTopic says that the dead-letter topic does not exist yet: the broker
// creates it with the group's first dead letter. A [ConsumerFunc] wraps it
// so that the drainer waits instead of failing.
var ErrNoTopic = errors.New("dead-letter topic does not exist yet")

// errNotFound is the cause OpenConsumer gives with ErrNoTopic.
var errNotFound = errors.New("the proxy answered TOPIC_NOT_FOUND")

// ConsumerFunc opens a consumer that reads a group's dead-letter topic as the
// drain group. While that topic does not exist it returns an error wrapping
// [ErrNoTopic]. If the consumer it returns has a Close() error method, the
// [Drainer] calls it when Run ends or Close is called.
type ConsumerFunc func(ctx context.Context) (mq.Consumer, error)

// OpenOpts are the optional knobs of [OpenConsumer]; a nil *OpenOpts takes
// every default.
type OpenOpts struct {
	// DrainGroup reads the dead-letter topic; catalog.DLQDrain when its Name
	// is empty. Its MaxDeliveryAttempts must be far above the stage group's,
	// since the broker keeps counting a dead letter's attempts.
	DrainGroup catalog.Group
	// Await is how long one Receive long-polls; 20 s when zero.
	Await time.Duration
}

// OpenConsumer returns a ConsumerFunc that starts a RocketMQ simple consumer
// of group's dead-letter topic once that topic exists. Before, it returns an
// error wrapping [ErrNoTopic] after one route query, without starting a
// client (see topicExists for why). The consumer is a *rocketmq.Consumer;
// the Drainer closes it.
func OpenConsumer(cfg config.RocketMQ, group catalog.Group, opts *OpenOpts) ConsumerFunc {
	if opts == nil {
		opts = &OpenOpts{}
	}
	drain := opts.DrainGroup
	if drain.Name == "" {
		drain = catalog.DLQDrain
	}
	topic := group.DLQTopic()
	params := rocketmq.ConsumerParams{
		Group:   drain.BrokerName(),
		Filters: map[string]string{topic: "*"},
		Await:   opts.Await,
	}
	return func(ctx context.Context) (mq.Consumer, error) {
		exists, err := topicExists(ctx, cfg, topic)
		if err != nil {
			return nil, fmt.Errorf("open consumer of %s: %w", topic, err)
		}
		if !exists {
			return nil, fmt.Errorf("open consumer of %s: %w: %w", topic, ErrNoTopic, errNotFound)
		}
		// The client's start takes no context; it is bounded by its own timeout.
		c, err := rocketmq.NewConsumer(cfg, params)
		if err != nil {
			if topicNotFound(err) {
				return nil, fmt.Errorf("open consumer of %s: %w: %w", topic, ErrNoTopic, err)
			}
			return nil, fmt.Errorf("open consumer of %s: %w", topic, err)
		}
		return c, nil
	}
}

// topicNotFound recognises the proxy's TOPIC_NOT_FOUND. Client v5.1.4 formats
// the route error of a failed start with %v, which drops the typed
// *rmq.ErrRpcStatus, so its text ("CODE: TOPIC_NOT_FOUND, ...") is matched
// too.
func topicNotFound(err error) bool {
	if status, ok := rmq.AsErrRpcStatus(err); ok {
		return status.GetCode() == int32(v2.Code_TOPIC_NOT_FOUND)
	}
	return strings.Contains(err.Error(), "CODE: "+v2.Code_TOPIC_NOT_FOUND.String())
}
