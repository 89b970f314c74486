package rocketmq_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/shared/config"
)

// TestReachable: an adapter is ready only while a proxy of its endpoint
// list accepts connections, and the refusal names the endpoint.
func TestReachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	up := l.Addr().String()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := closed.Addr().String()
	require.NoError(t, closed.Close())

	require.NoError(t, rocketmq.Reachable(t.Context(), config.RocketMQ{Endpoint: up}))
	require.NoError(t, rocketmq.Reachable(t.Context(), config.RocketMQ{Endpoint: down + ";" + up}), "one proxy of several is enough")
	err = rocketmq.Reachable(t.Context(), config.RocketMQ{Endpoint: down})
	require.ErrorContains(t, err, "rocketmq proxy "+down+" unreachable")
	require.NoError(t, l.Close())
	require.Error(t, rocketmq.Reachable(t.Context(), config.RocketMQ{Endpoint: up}))
}
