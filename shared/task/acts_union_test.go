package task_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/task"
)

// The predicates a stage gates its deliveries with are the union of those
// its replay rule tells apart.
func TestStageGatesAreTheirParts(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	cancel := task.ReconcileDue{Wait: task.Wait{Reason: task.ReasonCancel}}
	for _, s := range task.All() {
		for _, retry := range []*time.Time{nil, &now, &later} {
			tk := task.Task{Status: s, NextRetryAt: retry, MissingDerivatives: []string{"THUMBNAIL"}}
			require.Equal(t, task.SubmitResumes(tk) || task.SubmitStarts(tk, now), task.SubmitActs(tk, now), "%s", s)
			require.Equal(t, s == task.WaitingRetry && retry == &later, task.SubmitEarly(tk, now), "%s retry %v", s, retry)
			require.Equal(t, task.PostprocessActs(tk) || task.DerivativeRetryActs(tk, "THUMBNAIL"), task.TranscodeActs(tk, "THUMBNAIL"), "%s", s)
			for _, due := range []task.ReconcileDue{{}, cancel} {
				require.Equal(t, task.ReconcileCancelActs(tk, due) || task.ReconcileSubmitActs(tk), task.ReconcileActs(tk, due), "%s", s)
			}
		}
	}
}
