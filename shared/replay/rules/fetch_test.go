package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestFetch(t *testing.T) {
	t.Parallel()
	stored := preview.Effects{Assets: []preview.Asset{{AssetID: uuid.New(), Kind: "SOURCE"}}}
	delayed := task.FetchRequested{Wait: task.Wait{ExpectedStatus: task.Fetching, ExpectedVersion: 7, RetryAttempt: 2}}
	for _, tc := range []struct {
		name    string
		payload task.FetchRequested
		task    task.Task
		effects preview.Effects
		want    preview.Action
		code    string
	}{
		{"fetch", task.FetchRequested{}, task.Task{Status: task.Fetching}, preview.Effects{}, preview.Act, "fetch.store"},
		{"stored already", task.FetchRequested{}, task.Task{Status: task.Fetching}, stored, preview.Act, "fetch.record"},
		{"late", task.FetchRequested{}, task.Task{Status: task.Succeeded}, stored, preview.StaleNoop, "fetch.stale"},
		{"delayed fetch that holds", delayed, task.Task{Status: task.Fetching, Version: 7}, preview.Effects{}, preview.Act, "fetch.store"},
		{"delayed fetch overtaken", delayed, task.Task{Status: task.Fetching, Version: 8}, preview.Effects{}, preview.StaleNoop, "fetch.stale"},
	} {
		v := decideFetch(preview.State{Task: tc.task, Effects: tc.effects}, tc.payload)
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
