package rules

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestNotify(t *testing.T) {
	t.Parallel()
	v := decideNotify(preview.State{Task: task.Task{Status: task.Succeeded, Version: 7}}, task.StateChanged{To: task.Fetching, Version: 4})
	require.Equal(t, preview.Act, v.Action)
	require.Equal(t, "notify.push", v.Code)
	require.Contains(t, v.Reason, "SUCCEEDED (v7)")
}
