package topics_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmq"
	"github.com/aivedio/pipeline/adapter/mq/rocketmqtest"
	"github.com/aivedio/pipeline/adapter/topics"
	"github.com/aivedio/pipeline/shared/catalog"
)

func TestCommands(t *testing.T) {
	t.Parallel()
	admin := &topics.Admin{Namesrv: "127.0.0.1:9876", Cluster: "DefaultCluster"}
	cmds := admin.Commands([]catalog.Topic{catalog.GenerationSubmitDelay}, []catalog.Group{catalog.GroupNotify})
	require.Len(t, cmds, 2)
	require.Equal(t, []string{"updateTopic", "-n", "127.0.0.1:9876", "-c", "DefaultCluster", "-t", "generation_submit_delay",
		"-r", "8", "-w", "8", "-a", "+message.type=DELAY"}, cmds[0].Args)
	require.Equal(t, []string{"updateSubGroup", "-n", "127.0.0.1:9876", "-c", "DefaultCluster", "-g", "cg_notification_push_v1",
		"-r", "7", "-o", "true"}, cmds[1].Args)
}

func TestApplyNeedsTheAdminTool(t *testing.T) {
	t.Parallel()
	err := (&topics.Admin{}).Apply(context.Background(), catalog.Topics(), nil)
	require.ErrorContains(t, err, "ROCKETMQ_ADMIN_CLASSPATH and ROCKETMQ_NAMESRV must be set")

	admin := &topics.Admin{Java: "/nonexistent/java", Classpath: "x", Namesrv: "127.0.0.1:1"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // one try only: the command cannot succeed
	err = admin.Apply(ctx, []catalog.Topic{catalog.AssetFetch}, nil)
	require.ErrorContains(t, err, "apply topic asset_fetch (NORMAL)")
	require.ErrorContains(t, err, "is Java 17 installed")
}

// TestCatalogOnRealBroker proves that `adapter topics apply` (which
// `make test` and `make services-up` run) created each topic with its message
// type: the proxy takes a message of the right kind and refuses the wrong one.
func TestCatalogOnRealBroker(t *testing.T) {
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
