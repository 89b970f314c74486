package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestReview(t *testing.T) {
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
		{"review", asset, task.Task{Status: task.MediaProcessing}, preview.Act, "review.call"},
		{"another task's asset", other, task.Task{Status: task.MediaProcessing}, preview.Refuse, "asset.wrong_task"},
		{"a finished task", asset, task.Task{Status: task.Succeeded}, preview.StaleNoop, "review.stale"},
		{"a rejected task", asset, task.Task{Status: task.Failed, ErrorCode: task.ErrContentRejected}, preview.StaleNoop, "review.stale"},
	} {
		v := decideReview(preview.State{Task: tc.task, Effects: media}, task.Postprocess{AssetID: tc.asset, Step: catalog.TagReview})
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
