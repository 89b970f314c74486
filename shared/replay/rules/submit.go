package rules

import (
	"fmt"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Submit is the submit stage's rule for replay: what a replayed submit
// request would do to the task as it is now. It decides with the
// predicates the stage acts on, and reads the attempts from the replay's
// effects where the stage looks them up.
func Submit() preview.Rule {
	return preview.RuleOf(catalog.EventSubmitRequested, preview.PayloadTask, decideSubmit)
}

func decideSubmit(s preview.State, p task.SubmitRequested) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	switch {
	case !task.SubmitResumes(t) && !p.Holds(t):
		return preview.StaleNoop.Because("submit.stale", "the delayed resubmit expects the task %s at version %d, and it is %s: the submit stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at)
	case task.SubmitStarts(t, s.Now):
		if a := openAttempt(s.Effects); a != nil {
			return preview.Act.Because("submit.retry_attempt", "the task is %s: the submit stage would call %s again with attempt #%d and its provider idempotency key %s, so the provider returns the job that key already made, if any",
				at, a.Provider, a.AttemptNo, a.IdempotencyKey)
		}
		return preview.Act.Because("submit.new_attempt", "the task is %s with no open attempt: the submit stage would create attempt #%d and submit it (remote jobs so far: %s)",
			at, len(s.Effects.Attempts)+1, remoteJobs(s.Effects))
	case task.SubmitResumes(t):
		if a := openAttempt(s.Effects); a != nil {
			return preview.Act.Because("submit.resume_attempt", "the task is %s with attempt #%d open: the submit stage would resume it with the same provider idempotency key %s, reaching the same remote job",
				at, a.AttemptNo, a.IdempotencyKey)
		}
		return preview.StaleNoop.Because("submit.stale", "the task is %s but has no open attempt: the submit stage would record a stale no-op", at)
	case task.SubmitEarly(t, s.Now):
		return preview.StaleNoop.Because("submit.not_due", "the task is %s until %s: the delayed resubmit that set that time is still on its way, so the submit stage would record a stale no-op",
			at, t.NextRetryAt.UTC().Format(time.RFC3339))
	}
	return preview.StaleNoop.Because("submit.stale", "the task is %s, past submission: the submit stage acts only on QUEUED, WAITING_RETRY or SUBMITTING and would record a stale no-op; no new attempt, no second generation (remote jobs: %s)",
		at, remoteJobs(s.Effects))
}

// openAttempt is the attempt the stage resumes: the latest one still
// SUBMITTING.
func openAttempt(e preview.Effects) *preview.Attempt {
	for i := len(e.Attempts) - 1; i >= 0; i-- {
		if e.Attempts[i].Status == string(attempt.Submitting) {
			return &e.Attempts[i]
		}
	}
	return nil
}

// remoteJobs lists the remote jobs already made, for a reason.
func remoteJobs(e preview.Effects) string {
	var jobs []string
	for _, a := range e.Attempts {
		if a.ProviderJobID != "" {
			jobs = append(jobs, fmt.Sprintf("#%d %s", a.AttemptNo, a.ProviderJobID))
		}
	}
	if len(jobs) == 0 {
		return "none"
	}
	return strings.Join(jobs, ", ")
}
