//go:build !race

package rocketmq_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
)

// TestRealBrokerQueryRoute: a topic a broker serves has readable queues, a
// missing one is told apart as ErrNoRoute, and a proxy that is not there
// is an error of another kind, so a consumer's watcher replaces a client
// only once a broker serves its topic.
func TestRealBrokerQueryRoute(t *testing.T) {
	t.Parallel()
	cfg := rocketmqtest.Config(t)
	topic := catalog.Topic{Name: rocketmqtest.UniqueName("route"), Type: catalog.Normal}
	topic.Logical = topic.Name
	rocketmqtest.Apply(t, cfg, []catalog.Topic{topic}, nil)

	n, err := rocketmq.QueryRoute(t.Context(), cfg, topic.BrokerName(), 10*time.Second)
	require.NoError(t, err)
	require.Positive(t, n, "a served topic has readable queues")

	_, err = rocketmq.QueryRoute(t.Context(), cfg, rocketmqtest.UniqueName("missing"), 10*time.Second)
	require.ErrorIs(t, err, rocketmq.ErrNoRoute)

	down := config.RocketMQ{Endpoint: "127.0.0.1:1"}
	_, err = rocketmq.QueryRoute(t.Context(), down, topic.BrokerName(), time.Second)
	require.Error(t, err)
	require.NotErrorIs(t, err, rocketmq.ErrNoRoute)
}
