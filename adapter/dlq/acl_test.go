//go:build !race

package dlq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/shared/catalog"
)

// TestRealBrokerDrainProbeSignsForACL checks the drain's own route query,
// which signs its request by hand (probe.go), against the cluster with ACL
// on: signed right, a dead-letter topic that does not exist yet is told
// apart from a refusal; signed wrong, it is a refusal, never "no topic yet".
func TestRealBrokerDrainProbeSignsForACL(t *testing.T) {
	t.Parallel()
	cluster := rocketmqtest.ACLCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	group := catalog.Group{Name: rocketmqtest.UniqueName("acl_drain_cg"), MaxDeliveryAttempts: 2}

	_, err := dlq.OpenConsumer(cluster.As(cluster.Admin.AccessKey, cluster.Admin.SecretKey), group, nil)(ctx)
	require.ErrorIs(t, err, dlq.ErrNoTopic, "signed right, the proxy says the topic is missing")

	_, err = dlq.OpenConsumer(cluster.As(cluster.Admin.AccessKey, "not-the-secret"), group, nil)(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, dlq.ErrNoTopic)
	assert.ErrorContains(t, err, "UNAUTHORIZED")
}
