package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestPoll(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pollAt := now.Add(time.Minute)
	running := task.Task{Status: task.ProviderRunning, Provider: "p", ProviderJobID: "j-1", NextPollAt: &pollAt}
	canceling := running
	canceling.CancelRequested = true
	fetching := running
	fetching.Status = task.Fetching
	for _, tc := range []struct {
		name string
		v    preview.Verdict
		want preview.Action
		code string
	}{
		{"poll due", decidePoll(preview.State{Task: running}, task.PollDue{PollAt: pollAt}), preview.Act, "poll.due"},
		{"poll due after a cancel", decidePoll(preview.State{Task: canceling}, task.PollDue{PollAt: pollAt}), preview.Act, "poll.cancel"},
		{"poll chain moved", decidePoll(preview.State{Task: running}, task.PollDue{PollAt: now}), preview.StaleNoop, "poll.stale"},
		{"poll of a version the task left", decidePoll(preview.State{Task: running}, task.PollDue{PollAt: pollAt,
			Wait: task.Wait{ExpectedStatus: task.ProviderRunning, ExpectedVersion: running.Version + 1}}), preview.StaleNoop, "poll.stale"},
		{"poll after fetch", decidePoll(preview.State{Task: fetching}, task.PollDue{PollAt: pollAt}), preview.StaleNoop, "poll.stale"},
		{"callback for the job", decideCallback(preview.State{Task: running}, task.CallbackReceived{Provider: "p", ProviderJobID: "j-1"}), preview.Act, "callback.apply"},
		{"callback after a cancel", decideCallback(preview.State{Task: canceling}, task.CallbackReceived{Provider: "p", ProviderJobID: "j-1"}), preview.Act, "callback.cancel"},
		{"callback for another job", decideCallback(preview.State{Task: running}, task.CallbackReceived{Provider: "p", ProviderJobID: "j-0"}), preview.StaleNoop, "callback.stale"},
	} {
		require.Equal(t, tc.want, tc.v.Action, "%s: %s", tc.name, tc.v.Reason)
		require.Equal(t, tc.code, tc.v.Code, tc.name)
		require.NotEmpty(t, tc.v.Reason, tc.name)
	}
}
