package drive

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/task"
)

// TestFailedBy: each fault that can fail a task allows its code and
// nothing else does; a simulator that refuses every request explains no
// job's failure.
func TestFailedBy(t *testing.T) {
	t.Parallel()
	calm := providersim.DefaultOptions()
	require.Empty(t, FailedBy(nil, calm), "a calm provider fails nothing")
	noisy := calm
	noisy.Rate429, noisy.Rate5xx, noisy.RateDrop, noisy.OutputNotReady = 0.2, 0.3, 0.1, 1e9
	require.Empty(t, FailedBy(nil, noisy), "refusals, drops and late outputs are waited out, not failures")

	failing := calm
	failing.RateFail = 0.04
	require.Equal(t, []string{"provider.job_failed"}, FailedBy(nil, failing))
	refusing := calm
	refusing.RateContentFail = 0.04
	require.Equal(t, []string{"content_rejected"}, FailedBy(nil, refusing))
	refusing.RateContentFail, refusing.RateContentRejectSubmit = 0, 0.04
	require.Equal(t, []string{"content_rejected", "provider.job_failed"}, FailedBy(nil, failing, refusing))

	down := failing
	down.Rate5xx = 1
	require.Empty(t, FailedBy(nil, down), "a provider answering every request 503 makes no job to fail")

	review := reviewsim.DefaultOptions()
	review.Rate5xx, review.Rate429, review.RateMalformed = 0.1, 0.1, 0.1
	require.Empty(t, FailedBy(&review, calm), "a reviewer that never rejects fails nothing")
	review.RejectRate = 0.06
	require.Equal(t, []string{task.ErrContentRejected}, FailedBy(&review, calm))
}
