package reconcile

import (
	"slices"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// Preview is the stage's rule for replay: its two looks, at a lost submit
// and at the job of a cancel whose outcome is unknown.
func Preview() replay.Rule {
	return replay.RuleOf(catalog.EventReconcileDue, replay.PayloadTask, preview)
}

func preview(s replay.State, p task.ReconcileDue) replay.Verdict {
	t, at := s.Task, replay.At(s.Task)
	if task.ReconcileCancelActs(t, p) {
		return replay.Act.Because("reconcile.cancel_look", "the task is %s: the reconcile stage would look at provider job %s again, asking it to stop if it still runs, and apply the cancel rule (stopped: CANCELED and released; finished first: CANCELED_WITH_OUTPUT and charged; still unknown: look again later)",
			at, t.ProviderJobID)
	}
	if !task.ReconcileSubmitActs(t) {
		return replay.StaleNoop.Because("reconcile.stale", "the task is %s, not RECONCILING: the reconcile stage would record a stale no-op", at)
	}
	i := slices.IndexFunc(s.Effects.Attempts, func(a replay.Attempt) bool {
		return a.AttemptID == p.AttemptID && a.Status == string(attempt.SubmitUnknown)
	})
	if i < 0 {
		return replay.StaleNoop.Because("reconcile.stale", "attempt %s is no longer SUBMIT_UNKNOWN: the reconcile stage would record a stale no-op", p.AttemptID)
	}
	return replay.Act.Because("reconcile.lookup", "the task is %s: the reconcile stage would look attempt #%d up at %s by its client request id; a found job is adopted, not submitted again",
		at, s.Effects.Attempts[i].AttemptNo, s.Effects.Attempts[i].Provider)
}
