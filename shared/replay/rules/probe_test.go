package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	asset, other := uuid.New(), uuid.New()
	media := preview.Effects{Assets: []preview.Asset{{AssetID: asset, Kind: "SOURCE"}}}
	for _, tc := range []struct {
		name  string
		asset uuid.UUID
		task  task.Task
		want  preview.Action
		code  string
	}{
		{"probe", asset, task.Task{Status: task.MediaProcessing}, preview.Act, "probe.run"},
		{"another task's asset", other, task.Task{Status: task.MediaProcessing}, preview.Refuse, "asset.wrong_task"},
		{"never in the background", asset, task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, preview.StaleNoop, "probe.stale"},
	} {
		v := decideProbe(preview.State{Task: tc.task, Effects: media}, task.Postprocess{AssetID: tc.asset, Step: catalog.TagProbe})
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
