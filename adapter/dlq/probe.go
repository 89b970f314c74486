package dlq

import (
	"context"
	"errors"
	"time"

	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/shared/config"
)

// probeTimeout bounds one route query.
const probeTimeout = 10 * time.Second

// topicExists asks the proxy for topic's route with one route query instead
// of starting a consumer to find out: Run looks for a missing dead-letter
// topic every TopicPoll, on groups that may never have a dead letter, and
// every client start of v5.1.4 leaks goroutines for good (see
// [rocketmq.QueryRoute]).
func topicExists(ctx context.Context, cfg config.RocketMQ, topic string) (bool, error) {
	_, err := rocketmq.QueryRoute(ctx, cfg, topic, probeTimeout)
	if errors.Is(err, rocketmq.ErrNoRoute) {
		return false, nil
	}
	return err == nil, err
}
