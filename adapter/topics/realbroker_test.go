//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package topics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

// TestRealBrokerCatalog proves that `adapter topics apply` (which
// `make test` and `make services-up` run) created each topic with its message
// type: the proxy takes a message of the right kind and refuses the wrong one.
func TestRealBrokerCatalog(t *testing.T) {
	t.Parallel()
	cfg := rocketmqtest.Config(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var names []string
	for _, topic := range catalog.Topics() {
		names = append(names, topic.BrokerName())
	}
	producer, err := rocketmq.NewProducer(cfg, names...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })

	for _, topic := range catalog.Topics() {
		// No consumer group filters on this tag, so nothing downstream sees it.
		msg := &mq.Message{Topic: topic.BrokerName(), Tag: "catalog.check", Keys: []string{rocketmqtest.UniqueName("check")}, Body: []byte("{}")}
		switch topic.Type {
		case catalog.Delay:
			msg.DeliveryTime = time.Now().Add(time.Second)
		case catalog.FIFO:
			msg.MessageGroup = "catalog-check"
		}
		_, err := producer.Send(ctx, msg)
		require.NoError(t, err, "topic %s (%s); was `go run ./adapter topics apply` run?", topic.Name, topic.Type)

		if topic.Type != catalog.Normal {
			plain := &mq.Message{Topic: topic.BrokerName(), Tag: "catalog.check", Body: []byte("{}")}
			_, err := producer.Send(ctx, plain)
			require.ErrorContains(t, err, "message type not match", "%s topic %s took a NORMAL message", topic.Type, topic.Name)
		}
	}
}
