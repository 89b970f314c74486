package drive

import (
	"slices"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// codeJobFailed is the code a task fails with when its provider's job
// ends failed: functions/poll names the failure after the job's status.
const codeJobFailed = "provider.job_" + string(provider.StatusFailed)

// FailedUnder are the error codes a task may end FAILED with on a pipeline
// whose providers are sims and whose content reviewer (nil with review off)
// is review, given the faults they inject: Facts.Failed. A simulator that
// answers every request 429 or 503 makes no job, so its job faults explain
// nothing. Retries running out (SUBMIT_MAX_RETRIES refusals, an output
// missing for FETCH_MAX_WAIT) are left out: at any rate below one that
// takes far more bad draws in a row than a run makes, and a provider that
// refuses everything is failed over, so such a failure is a defect.
func FailedUnder(review *reviewsim.Server, sims ...*providersim.Server) []string {
	var ro *reviewsim.Options
	if review != nil {
		o := review.Options()
		ro = &o
	}
	var so []providersim.Options
	for _, s := range sims {
		if s != nil {
			so = append(so, s.Options())
		}
	}
	return FailedBy(ro, so...)
}

// FailedBy is [FailedUnder] from the simulators' options.
func FailedBy(review *reviewsim.Options, sims ...providersim.Options) []string {
	var codes []string
	for _, o := range sims {
		if o.Rate429+o.Rate5xx >= 1 {
			continue
		}
		if o.RateFail > 0 {
			codes = append(codes, codeJobFailed)
		}
		if o.RateContentRejectSubmit > 0 || o.RateContentFail > 0 {
			codes = append(codes, provider.CodeContentRejected)
		}
	}
	if review != nil && review.RejectRate > 0 {
		codes = append(codes, task.ErrContentRejected)
	}
	slices.Sort(codes)
	return slices.Compact(codes)
}
