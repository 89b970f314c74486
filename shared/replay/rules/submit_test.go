package rules

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func TestSubmit(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	open := preview.Effects{Attempts: []preview.Attempt{{AttemptNo: 1, Status: "SUBMITTING", Provider: "p", IdempotencyKey: "k-1"}}}
	accepted := preview.Effects{Attempts: []preview.Attempt{{AttemptNo: 1, Status: "ACCEPTED", ProviderJobID: "j-1"}}}
	for _, tc := range []struct {
		name    string
		payload task.SubmitRequested
		task    task.Task
		effects preview.Effects
		want    preview.Action
		code    string
	}{
		{"queued", task.SubmitRequested{}, task.Task{Status: task.Queued}, preview.Effects{}, preview.Act, "submit.new_attempt"},
		{"queued with open attempt", task.SubmitRequested{}, task.Task{Status: task.Queued}, open, preview.Act, "submit.retry_attempt"},
		{"waiting, not due", task.SubmitRequested{}, task.Task{Status: task.WaitingRetry, NextRetryAt: &later}, open, preview.StaleNoop, "submit.not_due"},
		{"waiting, due", task.SubmitRequested{}, task.Task{Status: task.WaitingRetry, NextRetryAt: &now}, open, preview.Act, "submit.retry_attempt"},
		{"submitting", task.SubmitRequested{}, task.Task{Status: task.Submitting}, open, preview.Act, "submit.resume_attempt"},
		{"submitting, no attempt", task.SubmitRequested{}, task.Task{Status: task.Submitting}, preview.Effects{}, preview.StaleNoop, "submit.stale"},
		{"running", task.SubmitRequested{}, task.Task{Status: task.ProviderRunning}, accepted, preview.StaleNoop, "submit.stale"},
		{"failed", task.SubmitRequested{}, task.Task{Status: task.Failed}, preview.Effects{}, preview.StaleNoop, "submit.stale"},
		{"delayed resubmit overtaken", task.SubmitRequested{Wait: task.Wait{ExpectedStatus: task.WaitingRetry, ExpectedVersion: 3}},
			task.Task{Status: task.WaitingRetry, Version: 5, NextRetryAt: &now}, open, preview.StaleNoop, "submit.stale"},
		{"delayed resubmit that holds", task.SubmitRequested{Wait: task.Wait{ExpectedStatus: task.WaitingRetry, ExpectedVersion: 5}},
			task.Task{Status: task.WaitingRetry, Version: 5, NextRetryAt: &now}, open, preview.Act, "submit.retry_attempt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := decideSubmit(preview.State{Task: tc.task, Effects: tc.effects, Now: now}, tc.payload)
			require.Equal(t, tc.want, v.Action, v.Reason)
			require.Equal(t, tc.code, v.Code)
			require.NotEmpty(t, v.Reason)
		})
	}
}
