package poll

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

func TestPreview(t *testing.T) {
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
		v    replay.Verdict
		want replay.Action
		code string
	}{
		{"poll due", previewPoll(replay.State{Task: running}, task.PollDue{PollAt: pollAt}), replay.Act, "poll.due"},
		{"poll due after a cancel", previewPoll(replay.State{Task: canceling}, task.PollDue{PollAt: pollAt}), replay.Act, "poll.cancel"},
		{"poll chain moved", previewPoll(replay.State{Task: running}, task.PollDue{PollAt: now}), replay.StaleNoop, "poll.stale"},
		{"poll after fetch", previewPoll(replay.State{Task: fetching}, task.PollDue{PollAt: pollAt}), replay.StaleNoop, "poll.stale"},
		{"callback for the job", previewCallback(replay.State{Task: running}, task.CallbackReceived{Provider: "p", ProviderJobID: "j-1"}), replay.Act, "callback.apply"},
		{"callback after a cancel", previewCallback(replay.State{Task: canceling}, task.CallbackReceived{Provider: "p", ProviderJobID: "j-1"}), replay.Act, "callback.cancel"},
		{"callback for another job", previewCallback(replay.State{Task: running}, task.CallbackReceived{Provider: "p", ProviderJobID: "j-0"}), replay.StaleNoop, "callback.stale"},
	} {
		require.Equal(t, tc.want, tc.v.Action, "%s: %s", tc.name, tc.v.Reason)
		require.Equal(t, tc.code, tc.v.Code, tc.name)
		require.NotEmpty(t, tc.v.Reason, tc.name)
	}
}
