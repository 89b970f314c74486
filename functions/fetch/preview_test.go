package fetch

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

func TestPreview(t *testing.T) {
	t.Parallel()
	stored := replay.Effects{Assets: []replay.Asset{{AssetID: uuid.New(), Kind: "SOURCE"}}}
	delayed := task.FetchRequested{Wait: task.Wait{ExpectedStatus: task.Fetching, ExpectedVersion: 7, RetryAttempt: 2}}
	for _, tc := range []struct {
		name    string
		payload task.FetchRequested
		task    task.Task
		effects replay.Effects
		want    replay.Action
		code    string
	}{
		{"fetch", task.FetchRequested{}, task.Task{Status: task.Fetching}, replay.Effects{}, replay.Act, "fetch.store"},
		{"stored already", task.FetchRequested{}, task.Task{Status: task.Fetching}, stored, replay.Act, "fetch.record"},
		{"late", task.FetchRequested{}, task.Task{Status: task.Succeeded}, stored, replay.StaleNoop, "fetch.stale"},
		{"delayed fetch that holds", delayed, task.Task{Status: task.Fetching, Version: 7}, replay.Effects{}, replay.Act, "fetch.store"},
		{"delayed fetch overtaken", delayed, task.Task{Status: task.Fetching, Version: 8}, replay.Effects{}, replay.StaleNoop, "fetch.stale"},
	} {
		v := preview(replay.State{Task: tc.task, Effects: tc.effects}, tc.payload)
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
