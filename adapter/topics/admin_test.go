package topics_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

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
