//go:build !race

// Tests that drive the real RocketMQ client run without -race: see the
// package doc of adapter/mq/rocketmq.

package dlq_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/dlq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/topics"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// realAwait is the consumers' long poll; the proxy refuses one much shorter
// (see adapter/mq/rocketmq's conformance test).
const realAwait = 4 * time.Second

func init() {
	leakOptions = append(leakOptions, rocketmqtest.ClientLeaks()...)
}

// TestRealBrokerOpenBeforeTheTopicLeaksNothing looks for a missing
// dead-letter topic many times, as Run does every TopicPoll on a group that
// has no dead letter, and checks that no goroutine is left behind (TestMain
// cannot: it tolerates the gRPC goroutines the client leaks). It is not
// parallel so that it counts goroutines alone: the parallel tests wait
// until it is done.
func TestRealBrokerOpenBeforeTheTopicLeaksNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := rocketmqtest.Config(t)
	stage := catalog.Group{Name: rocketmqtest.UniqueName("g_dlq_never")}
	open := dlq.OpenConsumer(cfg, stage, nil)
	look := func() {
		_, err := open(ctx)
		require.ErrorIs(t, err, dlq.ErrNoTopic)
	}
	look() // gRPC starts a few process-wide goroutines on first use
	time.Sleep(100 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 20 {
		look()
	}
	// Polled here, not with require.Eventually: that runs its condition in
	// a goroutine of its own, which would count itself.
	after := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, after, before, "goroutines left behind by 20 looks")
	t.Logf("goroutines: %d before 20 looks, %d after", before, after)
}

// TestRealBrokerDLQDrain starts a drainer before its group has a dead-letter
// topic (the proxy answers TOPIC_NOT_FOUND), lets a stage group of two
// attempts fail a message twice, receives once more so that the proxy moves
// it, and checks that the drainer quarantines it and ACKs it.
func TestRealBrokerDLQDrain(t *testing.T) {
	t.Parallel()
	cfg := rocketmqtest.Config(t)
	testDLQDrain(t, func(t *testing.T, topic catalog.Topic, stage, drain catalog.Group) (publisher, consumer, drainer config.RocketMQ) {
		rocketmqtest.Apply(t, cfg, []catalog.Topic{topic}, []catalog.Group{stage, drain})
		return cfg, cfg, cfg
	})
}

// TestRealBrokerDLQDrainWithACL runs the same on the cluster with ACL on,
// each client signing as a user that holds only its role's grant, as
// `adapter topics grant` makes them.
func TestRealBrokerDLQDrainWithACL(t *testing.T) {
	t.Parallel()
	cluster := rocketmqtest.ACLCluster(t)
	testDLQDrain(t, func(t *testing.T, topic catalog.Topic, stage, drain catalog.Group) (publisher, consumer, drainer config.RocketMQ) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		require.NoError(t, cluster.Admin.Apply(ctx, []catalog.Topic{topic}, []catalog.Group{stage, drain}))
		const secret = "dlq-acl-test-secret"
		users := [3]string{rocketmqtest.UniqueName("pub"), rocketmqtest.UniqueName("src"), rocketmqtest.UniqueName("drain")}
		require.NoError(t, cluster.Admin.GrantUser(ctx, users[0], secret, topics.PublisherGrant([]catalog.Topic{topic})))
		require.NoError(t, cluster.Admin.GrantUser(ctx, users[1], secret, topics.ConsumerGrant(stage)))
		require.NoError(t, cluster.Admin.GrantUser(ctx, users[2], secret, topics.DrainGrant(stage, drain)))
		return cluster.As(users[0], secret), cluster.As(users[1], secret), cluster.As(users[2], secret)
	})
}

// setupFunc creates the topic and groups on a cluster and returns the
// settings each client signs in with.
type setupFunc func(t *testing.T, topic catalog.Topic, stage, drain catalog.Group) (publisher, consumer, drainer config.RocketMQ)

func testDLQDrain(t *testing.T, setup setupFunc) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pool := dbtest.TestSchema(t)
	topic := catalog.Topic{Name: rocketmqtest.UniqueName("t_dlq"), Type: catalog.Normal}
	topic.Logical = topic.Name
	stage := catalog.Group{Name: rocketmqtest.UniqueName("g_dlq_stage"), MaxDeliveryAttempts: 2,
		Subscriptions: []catalog.Subscription{{Topic: topic}}}
	// The test's own drain group, as high as catalog.DLQDrain: the attempt
	// count goes on from the stage's.
	drain := catalog.Group{Name: rocketmqtest.UniqueName("g_dlq_drain"), MaxDeliveryAttempts: catalog.DLQDrain.MaxDeliveryAttempts}
	publisherCfg, consumerCfg, drainCfg := setup(t, topic, stage, drain)
	t.Logf("created topic and groups in %s", time.Since(start).Round(time.Millisecond))

	open := dlq.OpenConsumer(drainCfg, stage, &dlq.OpenOpts{DrainGroup: drain, Await: realAwait})
	_, err := open(ctx)
	require.ErrorIs(t, err, dlq.ErrNoTopic, "no dead letter yet")
	t.Logf("before the first dead letter: %v", err)

	d := dlq.New(dlq.Params{Group: stage, ConsumerFunc: open, DB: pool, TopicPoll: time.Second,
		Logger: newTestLogger(t)})
	stop := run(t, d)

	producer, err := rocketmq.NewProducer(publisherCfg, topic.BrokerName())
	require.NoError(t, err)
	t.Cleanup(func() { _ = producer.Close() })
	consumer, err := rocketmq.NewConsumer(consumerCfg, rocketmq.ConsumerParams{Group: stage.BrokerName(),
		Filters: map[string]string{topic.BrokerName(): "*"}, Await: realAwait})
	require.NoError(t, err)
	t.Cleanup(func() { _ = consumer.Close() })

	ev := validEvent(t)
	messageID := sendEvent(ctx, t, producer, topic.BrokerName(), "dlq.test", ev)

	// Fail it twice with a short invisible duration, then keep receiving:
	// the proxy moves it to the dead-letter topic on a receive after the
	// last attempt expired, and the drainer picks it up from there.
	attempts := 0
	deadline := time.Now().Add(90 * time.Second)
	for len(rows(t, pool)) == 0 {
		require.True(t, time.Now().Before(deadline), "not quarantined after %d attempts", attempts)
		rs, err := consumer.Receive(ctx, 16, 10*time.Second)
		require.NoError(t, err)
		for _, r := range rs {
			require.Equal(t, messageID, r.MessageID)
			attempts++
			require.Equal(t, attempts, r.DeliveryAttempt)
			require.LessOrEqual(t, attempts, stage.MaxDeliveryAttempts, "delivered past the group's maximum")
			require.NoError(t, consumer.ChangeInvisibleDuration(ctx, r, time.Second))
			t.Logf("attempt %d failed at %s", attempts, time.Since(start).Round(time.Millisecond))
		}
	}
	t.Logf("quarantined at %s", time.Since(start).Round(time.Millisecond))
	stop()

	got := rows(t, pool)
	require.Len(t, got, 1)
	r := got[0]
	require.Equal(t, stage.Name, r.Consumer)
	require.Equal(t, messageID, r.MessageID)
	require.NotNil(t, r.EventID)
	require.Equal(t, ev.ID(), *r.EventID)
	require.Equal(t, stage.DLQTopic(), r.Topic)
	require.Equal(t, "dlq.test", r.Tag)
	require.Equal(t, string(quarantine.SourceDLQ), r.Source)
	require.Equal(t, dlq.ErrorCode, r.ErrorCode)
	require.Greater(t, r.DeliveryAttempt, stage.MaxDeliveryAttempts, "the attempt count goes on in the drain group")
	require.Equal(t, ev.ID(), r.Properties["CE_id"])
	require.JSONEq(t, `{"n":1}`, string(r.Body))

	// ACKed: a drainer started again finds nothing.
	again := dlq.New(dlq.Params{Group: stage, ConsumerFunc: open, DB: pool, Logger: newTestLogger(t)})
	t.Cleanup(func() { _ = again.Close() })
	n, err := again.DrainOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	t.Logf("done in %s", time.Since(start).Round(time.Millisecond))
}
