package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestReconcile(t *testing.T) {
	t.Parallel()
	attemptID := uuid.New()
	unknown := preview.Effects{Attempts: []preview.Attempt{{AttemptNo: 1, AttemptID: attemptID, Status: "SUBMIT_UNKNOWN", Provider: "p"}}}
	resolved := preview.Effects{Attempts: []preview.Attempt{{AttemptNo: 1, AttemptID: attemptID, Status: "SUBMITTING", Provider: "p"}}}
	lookup := task.ReconcileDue{AttemptID: attemptID}
	cancel := task.ReconcileDue{AttemptID: attemptID, Wait: task.Wait{Reason: task.ReasonCancel}}
	for _, tc := range []struct {
		name    string
		payload task.ReconcileDue
		task    task.Task
		effects preview.Effects
		want    preview.Action
		code    string
	}{
		{"lost submit", lookup, task.Task{Status: task.Reconciling}, unknown, preview.Act, "reconcile.lookup"},
		{"resolved", lookup, task.Task{Status: task.Reconciling}, resolved, preview.StaleNoop, "reconcile.stale"},
		{"a look of a version the task left", task.ReconcileDue{AttemptID: attemptID, Wait: task.Wait{ExpectedStatus: task.Reconciling, ExpectedVersion: 3}},
			task.Task{Status: task.Reconciling, Version: 4}, unknown, preview.StaleNoop, "reconcile.stale"},
		{"late", lookup, task.Task{Status: task.ProviderRunning}, unknown, preview.StaleNoop, "reconcile.stale"},
		{"a cancel", cancel, task.Task{Status: task.CancelReconciling, ProviderJobID: "j-1"}, preview.Effects{}, preview.Act, "reconcile.cancel_look"},
		{"a decided cancel", cancel, task.Task{Status: task.Canceled}, preview.Effects{}, preview.StaleNoop, "reconcile.stale"},
	} {
		v := decideReconcile(preview.State{Task: tc.task, Effects: tc.effects}, tc.payload)
		require.Equal(t, tc.want, v.Action, "%s: %s", tc.name, v.Reason)
		require.Equal(t, tc.code, v.Code, tc.name)
	}
}
