package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestTranscode(t *testing.T) {
	t.Parallel()
	asset, thumb := uuid.New(), uuid.New()
	withThumb := preview.Effects{Assets: []preview.Asset{{AssetID: asset, Kind: "SOURCE"}, {AssetID: thumb, Kind: "THUMBNAIL", SourceAssetID: &asset}}}
	for _, tc := range []struct {
		name  string
		step  string
		asset uuid.UUID
		task  task.Task
		want  preview.Action
		code  string
	}{
		{"thumbnail made", catalog.TagThumbnail, asset, task.Task{Status: task.MediaProcessing}, preview.Act, "transcode.record"},
		{"proxy to make", catalog.TagTranscodeProxy, asset, task.Task{Status: task.MediaProcessing}, preview.Act, "transcode.run"},
		{"another task's asset", catalog.TagThumbnail, uuid.New(), task.Task{Status: task.MediaProcessing}, preview.Refuse, "asset.wrong_task"},
		{"late", catalog.TagThumbnail, asset, task.Task{Status: task.Succeeded}, preview.StaleNoop, "transcode.stale"},
		{"waveform retried in the background", catalog.TagWaveform, asset, task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, preview.Act, "transcode.background"},
	} {
		v := decideTranscode(preview.State{Task: tc.task, Effects: withThumb}, task.Postprocess{AssetID: tc.asset, Step: tc.step})
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
