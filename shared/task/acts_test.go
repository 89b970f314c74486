package task_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/task"
)

// Each stage acts on exactly the states listed, for a task whose other
// fields fit the event.
func TestStagesActOn(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	pollAt := now.Add(time.Minute)
	tests := []struct {
		name string
		acts func(task.Task) bool
		on   []task.Status
	}{
		{"submit starts", func(tk task.Task) bool { return task.SubmitStarts(tk, now) }, []task.Status{task.Queued, task.WaitingRetry}},
		{"submit resumes", task.SubmitResumes, []task.Status{task.Submitting}},
		{"poll", func(tk task.Task) bool { return task.PollActs(tk, pollAt) }, []task.Status{task.ProviderRunning}},
		{"callback", func(tk task.Task) bool { return task.CallbackActs(tk, "p", "j-1") }, []task.Status{task.ProviderRunning}},
		{"fetch", task.FetchActs, []task.Status{task.Fetching}},
		{"postprocess", task.PostprocessActs, []task.Status{task.MediaProcessing}},
		{"settle", task.SettleActs, []task.Status{task.Succeeded, task.Failed, task.Canceled, task.CanceledWithOut}},
		{"reconcile submit", task.ReconcileSubmitActs, []task.Status{task.Reconciling}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, s := range task.All() {
				tk := task.Task{Status: s, NextPollAt: &pollAt, Provider: "p", ProviderJobID: "j-1"}
				require.Equal(t, slices.Contains(tt.on, s), tt.acts(tk), "%s", s)
			}
		})
	}
}

// What a stage's rule reads besides the status: the retry time, the poll
// chain, the job a callback names, the missing derivatives, the reason of a
// reconcile.
func TestStagesReadMoreThanTheStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { x := now.Add(d); return &x }
	tests := []struct {
		name string
		acts bool
		want bool
	}{
		{"retry without a time", task.SubmitStarts(task.Task{Status: task.WaitingRetry}, now), true},
		{"retry past due", task.SubmitStarts(task.Task{Status: task.WaitingRetry, NextRetryAt: at(-time.Minute)}, now), true},
		{"retry a second early", task.SubmitStarts(task.Task{Status: task.WaitingRetry, NextRetryAt: at(time.Second)}, now), true},
		{"retry more than a second early", task.SubmitStarts(task.Task{Status: task.WaitingRetry, NextRetryAt: at(time.Second + time.Millisecond)}, now), false},
		{"queued with a retry time", task.SubmitStarts(task.Task{Status: task.Queued, NextRetryAt: at(time.Hour)}, now), true},
		{"poll of the live chain", task.PollActs(task.Task{Status: task.ProviderRunning, NextPollAt: at(time.Minute)}, now.Add(time.Minute)), true},
		{"poll of a chain that moved on", task.PollActs(task.Task{Status: task.ProviderRunning, NextPollAt: at(time.Minute)}, now), false},
		{"poll without a chain", task.PollActs(task.Task{Status: task.ProviderRunning}, now), false},
		{"callback for another job", task.CallbackActs(task.Task{Status: task.ProviderRunning, Provider: "p", ProviderJobID: "j-1"}, "p", "j-0"), false},
		{"callback from another provider", task.CallbackActs(task.Task{Status: task.ProviderRunning, Provider: "p", ProviderJobID: "j-1"}, "q", "j-1"), false},
		{"missing waveform of a finished task", task.DerivativeRetryActs(task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, "WAVEFORM"), true},
		{"missing waveform of a task kept after cancel", task.DerivativeRetryActs(task.Task{Status: task.CanceledWithOut, MissingDerivatives: []string{"WAVEFORM"}}, "WAVEFORM"), true},
		{"a derivative not missing", task.DerivativeRetryActs(task.Task{Status: task.Succeeded, MissingDerivatives: []string{"WAVEFORM"}}, "THUMBNAIL"), false},
		{"missing waveform of a failed task", task.DerivativeRetryActs(task.Task{Status: task.Failed, MissingDerivatives: []string{"WAVEFORM"}}, "WAVEFORM"), false},
		{"a cancel to look at", task.ReconcileCancelActs(task.Task{Status: task.CancelReconciling}, task.ReconcileDue{Wait: task.Wait{Reason: task.ReasonCancel}}), true},
		{"a lost submit of a cancel-reconciling task", task.ReconcileCancelActs(task.Task{Status: task.CancelReconciling}, task.ReconcileDue{}), false},
		{"a cancel already decided", task.ReconcileCancelActs(task.Task{Status: task.Canceled}, task.ReconcileDue{Wait: task.Wait{Reason: task.ReasonCancel}}), false},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.acts, tt.name)
	}
}
