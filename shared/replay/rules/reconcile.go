package rules

import (
	"slices"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Reconcile is the reconcile stage's rule for replay: its two looks, at a
// lost submit and at the job of a cancel whose outcome is unknown.
func Reconcile() preview.Rule {
	return preview.RuleOf(catalog.EventReconcileDue, preview.PayloadTask, decideReconcile)
}

func decideReconcile(s preview.State, p task.ReconcileDue) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	if !p.Holds(t) {
		return preview.StaleNoop.Because("reconcile.stale", "the delayed look expects the task %s at version %d, and it is %s: the reconcile stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at)
	}
	if !task.ReconcileActs(t, p) {
		return preview.StaleNoop.Because("reconcile.stale", "the task is %s, not RECONCILING: the reconcile stage would record a stale no-op", at)
	}
	if task.ReconcileCancelActs(t, p) {
		return preview.Act.Because("reconcile.cancel_look", "the task is %s: the reconcile stage would look at provider job %s again, asking it to stop if it still runs, and apply the cancel rule (stopped: CANCELED and released; finished first: CANCELED_WITH_OUTPUT and charged; still unknown: look again later)",
			at, t.ProviderJobID)
	}
	i := slices.IndexFunc(s.Effects.Attempts, func(a preview.Attempt) bool {
		return a.AttemptID == p.AttemptID && a.Status == string(attempt.SubmitUnknown)
	})
	if i < 0 {
		return preview.StaleNoop.Because("reconcile.stale", "attempt %s is no longer SUBMIT_UNKNOWN: the reconcile stage would record a stale no-op", p.AttemptID)
	}
	return preview.Act.Because("reconcile.lookup", "the task is %s: the reconcile stage would look attempt #%d up at %s by its client request id; a found job is adopted, not submitted again",
		at, s.Effects.Attempts[i].AttemptNo, s.Effects.Attempts[i].Provider)
}
