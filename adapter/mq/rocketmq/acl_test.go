//go:build !race

package rocketmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/topics"
	"github.com/aivedio/pipeline/shared/catalog"
)

// TestRealBrokerACL runs the clients against the test cluster with ACL 2.0
// on, as users holding exactly the grants the ACL section of docs/messaging.md gives each
// binary: the credentials come from configuration, the grants suffice, and
// every refusal is told apart from an outage.
func TestRealBrokerACL(t *testing.T) {
	t.Parallel()
	cluster := rocketmqtest.ACLCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	topic := catalog.Topic{Name: rocketmqtest.UniqueName("acl_work"), Type: catalog.Normal}
	other := catalog.Topic{Name: rocketmqtest.UniqueName("acl_other"), Type: catalog.Normal}
	group := catalog.Group{Name: rocketmqtest.UniqueName("acl_cg"), MaxDeliveryAttempts: 4,
		Subscriptions: []catalog.Subscription{{Topic: topic}}}
	require.NoError(t, cluster.Admin.Apply(ctx, []catalog.Topic{topic, other}, []catalog.Group{group}),
		"the admin tool signs as the super user")

	publisher, consumer := rocketmqtest.UniqueName("relay"), rocketmqtest.UniqueName("source")
	const secret = "s3cret-for-acl-test"
	require.NoError(t, cluster.Admin.GrantUser(ctx, publisher, secret, topics.PublisherGrant([]catalog.Topic{topic})))
	require.NoError(t, cluster.Admin.GrantUser(ctx, consumer, secret, topics.ConsumerGrant(group)))
	require.NoError(t, cluster.Admin.GrantUser(ctx, consumer, secret, topics.ConsumerGrant(group)),
		"granting twice is harmless")

	t.Run("granted users publish, receive and settle", func(t *testing.T) {
		p, err := rocketmq.NewProducer(cluster.As(publisher, secret), topic.BrokerName())
		require.NoError(t, err)
		defer p.Close()
		c, err := rocketmq.NewConsumer(cluster.As(consumer, secret), rocketmq.ConsumerParams{
			Group: group.BrokerName(), Filters: map[string]string{topic.BrokerName(): "*"}, Await: realAwait})
		require.NoError(t, err)
		defer c.Close()

		for _, body := range []string{"first", "second"} {
			_, err := p.Send(ctx, &mq.Message{Topic: topic.BrokerName(), Tag: "t", Keys: []string{body}, Body: []byte(body)})
			require.NoError(t, err)
		}
		got := map[string]int{}
		for deadline := time.Now().Add(time.Minute); len(got) < 2 || got["first"] < 2; {
			require.True(t, time.Now().Before(deadline), "received %v", got)
			msgs, err := c.Receive(ctx, 8, 10*time.Second)
			require.NoError(t, err)
			for _, m := range msgs {
				got[string(m.Body)]++
				if string(m.Body) == "first" && m.DeliveryAttempt == 1 {
					// Giving a message back is a subscriber's action too.
					require.NoError(t, c.ChangeInvisibleDuration(ctx, m, time.Second))
					continue
				}
				require.NoError(t, c.Ack(ctx, m))
			}
		}
	})

	t.Run("a wrong secret is refused as unauthenticated", func(t *testing.T) {
		_, err := rocketmq.NewProducer(cluster.As(publisher, "not-the-secret"), topic.BrokerName())
		require.Error(t, err)
		assert.ErrorIs(t, err, mq.ErrUnauthenticated)
		assert.ErrorContains(t, err, "ROCKETMQ_SECRET_KEY")
	})

	t.Run("no credentials are refused as unauthenticated", func(t *testing.T) {
		_, err := rocketmq.NewConsumer(cluster.As("", ""), rocketmq.ConsumerParams{
			Group: group.BrokerName(), Filters: map[string]string{topic.BrokerName(): "*"}, Await: realAwait})
		require.Error(t, err)
		assert.ErrorIs(t, err, mq.ErrUnauthenticated)
	})

	t.Run("a topic outside the grant is forbidden", func(t *testing.T) {
		p, err := rocketmq.NewProducer(cluster.As(publisher, secret), topic.BrokerName())
		require.NoError(t, err)
		defer p.Close()
		_, err = p.Send(ctx, &mq.Message{Topic: other.BrokerName(), Tag: "t", Body: []byte("x")})
		require.Error(t, err)
		assert.ErrorIs(t, err, mq.ErrForbidden)
		assert.False(t, errors.Is(err, mq.ErrUnauthenticated))
	})

	t.Run("a consumer may not publish", func(t *testing.T) {
		_, err := rocketmq.NewProducer(cluster.As(consumer, secret), topic.BrokerName())
		require.Error(t, err, "a consumer's credentials started a producer")
		assert.ErrorIs(t, err, mq.ErrForbidden)
		assert.ErrorContains(t, err, consumer)
	})
}
