package probe

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

func TestPreview(t *testing.T) {
	t.Parallel()
	asset, other := uuid.New(), uuid.New()
	media := replay.Effects{Assets: []replay.Asset{{AssetID: asset, Kind: "SOURCE"}}}
	for _, tc := range []struct {
		name  string
		asset uuid.UUID
		task  task.Task
		want  replay.Action
		code  string
	}{
		{"probe", asset, task.Task{Status: task.MediaProcessing}, replay.Act, "probe.run"},
		{"another task's asset", other, task.Task{Status: task.MediaProcessing}, replay.Refuse, "asset.wrong_task"},
		{"never in the background", asset, task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, replay.StaleNoop, "probe.stale"},
	} {
		v := preview(replay.State{Task: tc.task, Effects: media}, task.Postprocess{AssetID: tc.asset, Step: catalog.TagProbe})
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
