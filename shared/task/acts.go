package task

import (
	"slices"
	"time"
)

// The predicates below say, per event type, which task states the stage
// that consumes it acts on; an event for a task in any other state is stale
// and the stage records a no-op. They are the one statement of that rule:
// each stage in functions/ decides its deliveries with them, and its replay
// rule (shared/replay/rules) with the same ones, so the preview cannot
// drift from the stage it describes. They judge the task's row only:
// what a stage looks up besides (an open attempt, an asset) and its
// re-check under the row lock stay with the stage.

// earlyWakeUp is how far before its next_retry_at a resubmit may arrive
// and still count as due: broker timers are not exact.
const earlyWakeUp = time.Second

// SubmitStarts reports whether the submit stage, woken at now, starts a
// submit of t (a new attempt, or the one a refused call left open): t is
// QUEUED, or WAITING_RETRY with its retry due. A wake-up earlier than that
// is early or a duplicate: the delayed resubmit that set next_retry_at is
// still on its way.
func SubmitStarts(t Task, now time.Time) bool {
	switch t.Status {
	case Queued:
		return true
	case WaitingRetry:
		return t.NextRetryAt == nil || t.NextRetryAt.Sub(now) <= earlyWakeUp
	}
	return false
}

// SubmitResumes reports whether the submit stage resumes t's submit: t is
// SUBMITTING, and the attempt still open, if any, is called again with its
// own idempotency key.
func SubmitResumes(t Task) bool { return t.Status == Submitting }

// SubmitActs reports whether the submit stage, woken at now, works on t
// at all: it resumes t's submit or starts one.
func SubmitActs(t Task, now time.Time) bool { return SubmitResumes(t) || SubmitStarts(t, now) }

// SubmitEarly reports whether t waits for a retry that is not due at now:
// the wake-up is early or a duplicate, and the submit stage does nothing.
func SubmitEarly(t Task, now time.Time) bool {
	return t.Status == WaitingRetry && !SubmitStarts(t, now)
}

// PollActs reports whether a poll scheduled for pollAt follows t's job: t
// is PROVIDER_RUNNING and pollAt is its next_poll_at, which names the one
// live poll chain. Any other poll is a duplicate or a chain that moved on.
func PollActs(t Task, pollAt time.Time) bool {
	return t.Status == ProviderRunning && t.NextPollAt != nil && t.NextPollAt.Equal(pollAt)
}

// CallbackActs reports whether a callback about job jobID of provider
// applies to t: t is PROVIDER_RUNNING on that very job.
func CallbackActs(t Task, provider, jobID string) bool {
	return t.Status == ProviderRunning && t.Provider == provider && t.ProviderJobID == jobID
}

// FetchActs reports whether the fetch stage stores t's output: t is
// FETCHING.
func FetchActs(t Task) bool { return t.Status == Fetching }

// PostprocessActs reports whether the probe and transcode stages work on
// t's output: t is MEDIA_PROCESSING. The transcode stage also acts on a
// finished task, see DerivativeRetryActs.
func PostprocessActs(t Task) bool { return t.Status == MediaProcessing }

// DerivativeRetryActs reports whether the transcode stage makes, in the
// background, a derivative of kind (an assets.kind) that t went without:
// t ended with its output charged and lists kind in missing_derivatives.
func DerivativeRetryActs(t Task, kind string) bool {
	return t.Status.Charged() && slices.Contains(t.MissingDerivatives, kind)
}

// TranscodeActs reports whether the transcode stage makes a derivative of
// kind for t: t's output is being processed, or t finished without it.
func TranscodeActs(t Task, kind string) bool {
	return PostprocessActs(t) || DerivativeRetryActs(t, kind)
}

// SettleActs reports whether the settle stage settles t's reservation: t
// has ended, and not in NEEDS_ATTENTION, which waits for a person. A task
// still running is settled by the event of its final transition.
func SettleActs(t Task) bool { return t.Status.Terminal() && t.Status != NeedsAttention }

// ReconcileSubmitActs reports whether the reconcile stage looks for the job
// of t's lost submit: t is RECONCILING.
func ReconcileSubmitActs(t Task) bool { return t.Status == Reconciling }

// ReasonCancel marks a task.reconcile.due about a cancel, not a lost submit.
const ReasonCancel = "cancel"

// ReconcileCancelActs reports whether the reconcile stage looks again at
// the provider job of t, whose client canceled while it ran: t is
// CANCEL_RECONCILING and the event is about that cancel.
func ReconcileCancelActs(t Task, due ReconcileDue) bool {
	return t.Status == CancelReconciling && due.Reason == ReasonCancel
}

// ReconcileActs reports whether the reconcile stage looks at t for due:
// its cancel ([ReconcileCancelActs]) or its lost submit
// ([ReconcileSubmitActs]).
func ReconcileActs(t Task, due ReconcileDue) bool {
	return ReconcileCancelActs(t, due) || ReconcileSubmitActs(t)
}
