package task_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/task"
)

func TestLegal(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to task.Status
		want     bool
	}{
		{task.Queued, task.Submitting, true},
		{task.Queued, task.Canceled, true},
		{task.Queued, task.ProviderRunning, false},
		{task.Submitting, task.ProviderRunning, true},
		{task.Submitting, task.WaitingRetry, true},
		{task.Submitting, task.Reconciling, true},
		{task.WaitingRetry, task.Submitting, true},
		{task.WaitingRetry, task.Canceled, true},
		{task.Reconciling, task.NeedsAttention, true},
		{task.ProviderRunning, task.Fetching, true},
		{task.ProviderRunning, task.CancelReconciling, true},
		{task.ProviderRunning, task.Submitting, false},
		{task.Fetching, task.MediaProcessing, true},
		{task.MediaProcessing, task.Succeeded, true},
		{task.MediaProcessing, task.Fetching, false},
		{task.CancelReconciling, task.CanceledWithOut, true},
		// Any non-terminal state may fail; no terminal state moves.
		{task.Fetching, task.Failed, true},
		{task.Reconciling, task.Failed, true},
		{task.Succeeded, task.Failed, false},
		{task.Failed, task.Submitting, false},
		{task.Canceled, task.Queued, false},
		{task.NeedsAttention, task.Submitting, false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, task.Legal(tt.from, tt.to), "%s -> %s", tt.from, tt.to)
	}
}

func TestTerminalStatesHaveNoWayOut(t *testing.T) {
	t.Parallel()
	for _, from := range task.All() {
		if !from.Terminal() {
			continue
		}
		for _, to := range task.All() {
			require.False(t, task.Legal(from, to), "%s is terminal but may move to %s", from, to)
		}
	}
}
