package review_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/review"
	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	reviews "github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

func TestApprovalBeforeTheDerivativesFinishesWithTheLastDerivative(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 0))
	r := w.reviewRow(t)
	require.Equal(t, reviews.Approved, r.Status)
	require.Equal(t, "approve", r.Decision)
	require.Equal(t, reviewsim.Name, r.Reviewer)
	require.Equal(t, 1, r.Attempts)
	require.NotNil(t, r.DecidedAt)
	require.Equal(t, task.MediaProcessing, w.reload(t).Status, "an approval alone does not finish a task whose derivatives are missing")
	require.Empty(t, w.settles(t))

	st := w.sim.Stats()
	require.Equal(t, 1, st.Approved)
	require.Equal(t, 3, st.FramesFetched, "the reviewer fetched every frame through its presigned URL")
	require.Zero(t, st.BadSignature)

	w.deliverDerivatives(t)
	require.Equal(t, task.Succeeded, w.reload(t).Status)
	require.Equal(t, []task.SettleRequested{{TaskID: w.task.ID, Status: task.Succeeded}}, w.settles(t))
}

func TestApprovalAfterTheDerivativesFinishesTheTask(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.deliverDerivatives(t)
	require.Equal(t, task.MediaProcessing, w.reload(t).Status, "every derivative stored is not enough: the review is required")
	require.Empty(t, w.settles(t))

	require.NoError(t, w.deliverReview(t, uuid.NewString(), 0))
	got := w.reload(t)
	require.Equal(t, task.Succeeded, got.Status)
	require.Equal(t, 100, got.Progress)
	require.Equal(t, []task.SettleRequested{{TaskID: w.task.ID, Status: task.Succeeded}}, w.settles(t))
}

func TestRejectionFailsTheTaskAndChargesItOnce(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.sim.Script(w.task.ID.String(), reviewsim.Reject+":policy.nudity")
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 0))
	got := w.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, task.ErrContentRejected, got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "policy.nudity")
	require.True(t, got.Charged(), "the provider charged us for the output")
	require.False(t, got.Served())
	r := w.reviewRow(t)
	require.Equal(t, reviews.Rejected, r.Status)
	require.Equal(t, "policy.nudity", r.ReasonCode)
	require.Equal(t, []string{"simulated"}, r.Labels)

	var ready int
	require.NoError(t, w.pool.QueryRow(ctx(t), `SELECT count(*) FROM assets WHERE task_id = $1 AND status = 'READY'`, w.task.ID).Scan(&ready))
	require.Zero(t, ready, "a rejected output is not served")

	// The derivatives arriving later change nothing.
	w.deliverDerivatives(t)
	require.Equal(t, task.Failed, w.reload(t).Status)

	// Billing captures, once, however often the settle arrives.
	settles := w.settles(t)
	require.Equal(t, []task.SettleRequested{{TaskID: w.task.ID, Status: task.Failed}}, settles)
	fn := settle.New(settle.Params{Pool: w.pool})
	for range 2 {
		_, err := fn.Handle(ctx(t), cloudEvent(t, w.task, uuid.NewString(), catalog.EventSettleRequested, settles[0]))
		require.NoError(t, err)
	}
	res, ledger, err := billing.OfTask(ctx(t), w.pool, w.task.TenantID, w.task.ID)
	require.NoError(t, err)
	require.Equal(t, "CAPTURED", res.Status)
	require.Len(t, ledger, 1)
	require.Equal(t, "CAPTURE", ledger[0].Type)
	require.Equal(t, int64(-reserved), ledger[0].Amount)
}

func TestReviewerDownIsABusinessWaitThenApproves(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.deliverDerivatives(t)
	w.sim.SetDown(true)
	start := time.Now()
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 0), "a reviewer down is acknowledged: a wait, not a failure retry")
	end := time.Now()
	require.Equal(t, task.MediaProcessing, w.reload(t).Status, "never a silent pass")
	r := w.reviewRow(t)
	require.Equal(t, reviews.Waiting, r.Status)
	require.Equal(t, 1, r.Attempts)
	require.NotNil(t, r.WaitingSince)
	require.NotEmpty(t, r.LastError)
	waits := w.delayedReviews(t)
	require.Len(t, waits, 1)
	require.Equal(t, 1, waits[0].RetryAttempt)
	require.Equal(t, task.MediaProcessing, waits[0].ExpectedStatus)
	// Backoff(0, 5s, 1m, 0, 0.5) is 3.75s from the failed call, which
	// came after the frames were made.
	require.False(t, waits[0].at.Before(start.Add(3750*time.Millisecond)), "due %s", waits[0].at)
	require.False(t, waits[0].at.After(end.Add(3750*time.Millisecond)), "due %s", waits[0].at)
	require.Equal(t, 1, w.sim.Stats().Refused)

	// Still down: the next wait is longer, and the chain moves on.
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 1))
	waits = w.delayedReviews(t)
	require.Len(t, waits, 2)
	require.Equal(t, 2, waits[1].RetryAttempt)
	require.Greater(t, waits[1].at.Sub(waits[0].at), 3*time.Second)
	require.Equal(t, task.MediaProcessing, w.reload(t).Status)

	w.sim.SetDown(false)
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 2))
	require.Equal(t, task.Succeeded, w.reload(t).Status)
	r = w.reviewRow(t)
	require.Equal(t, reviews.Approved, r.Status)
	require.Equal(t, 3, r.Attempts)
}

func TestThrottledAndBrokenAnswersWait(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	// A 429 asking for a minute is waited for at least that long.
	w.sim.Script(w.task.ID.String(), reviewsim.Throttle, reviewsim.Err5xx, reviewsim.Malformed, reviewsim.Approve)
	start := time.Now()
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 0))
	waits := w.delayedReviews(t)
	require.Len(t, waits, 1)
	require.GreaterOrEqual(t, waits[0].at.Sub(start), time.Second, "Retry-After is honoured")
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 1))
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 2))
	r := w.reviewRow(t)
	require.Equal(t, reviews.Waiting, r.Status, "a malformed answer is no decision")
	require.Equal(t, 1, r.Malformed)
	require.Contains(t, r.LastError, "not approve or reject")
	require.Len(t, w.delayedReviews(t), 3)
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 3))
	require.Equal(t, reviews.Approved, w.reviewRow(t).Status)
	st := w.sim.Stats()
	require.Equal(t, 1, st.Throttled)
	require.Equal(t, 1, st.Errors5xx)
	require.Equal(t, 1, st.Malformed)
}

func TestReviewerDownPastTheMaximumWaitNeedsAttention(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.sim.SetDown(true)
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 0))
	// The reviewer has been down for longer than REVIEW_MAX_WAIT.
	_, err := w.pool.Exec(ctx(t), `UPDATE task_reviews SET waiting_since = now() - interval '31 minutes' WHERE task_id = $1`, w.task.ID)
	require.NoError(t, err)
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 1))
	got := w.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, review.CodeUnavailable, got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "REVIEW_MAX_WAIT")
	require.Contains(t, got.ErrorMessage, "decide the task by hand")
	require.Equal(t, reviews.Unavailable, w.reviewRow(t).Status)
	require.Len(t, w.delayedReviews(t), 1, "no further wait is scheduled")
	require.Empty(t, w.settles(t), "the reservation stays held for the person who decides")
}

func TestDuplicateAndLateReviewsAreNoops(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.sim.SetDown(true)
	first := uuid.NewString()
	require.NoError(t, w.deliverReview(t, first, 0))
	calls := w.sim.Stats().Requests
	require.Equal(t, 1, calls)

	// The same event again: the inbox answers it, no call.
	require.NoError(t, w.deliverReview(t, first, 0))
	require.Equal(t, calls, w.sim.Stats().Requests)

	// A copy of the superseded first step (the probe's, re-emitted): a
	// stale no-op, no call.
	late := uuid.NewString()
	require.NoError(t, w.deliverReview(t, late, 0))
	require.Equal(t, "STALE_NOOP", inboxResult(t, w.pool, catalog.GroupReview.Name, late))
	require.Equal(t, calls, w.sim.Stats().Requests)
	require.Equal(t, 1, w.reviewRow(t).Attempts)

	// After the decision, the wait's own delayed step is stale too.
	w.sim.SetDown(false)
	require.NoError(t, w.deliverReview(t, uuid.NewString(), 1))
	require.Equal(t, reviews.Approved, w.reviewRow(t).Status)
	again := uuid.NewString()
	require.NoError(t, w.deliverReview(t, again, 1))
	require.Equal(t, "STALE_NOOP", inboxResult(t, w.pool, catalog.GroupReview.Name, again))
	require.Equal(t, 2, w.sim.Stats().Requests)
}

func TestBadSignatureIsNoPass(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	cfg := w.cfg
	cfg.Secret = "not-the-reviewers"
	fn := review.New(review.Params{Pool: w.pool, Blob: w.store, Media: newTool(t), Config: cfg, TmpDir: t.TempDir()})
	_, err := fn.Handle(ctx(t), cloudEvent(t, w.task, uuid.NewString(), catalog.EventPostprocess,
		task.Postprocess{TaskID: w.task.ID, AssetID: w.source, Step: catalog.TagReview}))
	require.NoError(t, err)
	require.Equal(t, 1, w.sim.Stats().BadSignature)
	r := w.reviewRow(t)
	require.Equal(t, reviews.Waiting, r.Status, "a refused request is waited on, never taken for an approval")
	require.Contains(t, r.LastError, "HTTP 401")
}

func TestReviewOffOnTheStageStillWaits(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.deliverDerivatives(t)
	fn := review.New(review.Params{Pool: w.pool, Blob: w.store, Media: newTool(t), Config: testConfig("", ""), TmpDir: t.TempDir()})
	_, err := fn.Handle(ctx(t), cloudEvent(t, w.task, uuid.NewString(), catalog.EventPostprocess,
		task.Postprocess{TaskID: w.task.ID, AssetID: w.source, Step: catalog.TagReview}))
	require.NoError(t, err)
	require.Equal(t, task.MediaProcessing, w.reload(t).Status, "a task promised a review never finishes without one")
	require.Contains(t, w.reviewRow(t).LastError, "REVIEW_URL is not set")
}

func TestSignature(t *testing.T) {
	t.Parallel()
	body := []byte(`{"task_id":"x"}`)
	sig := review.Sign("s3cret", body)
	require.Regexp(t, `^sha256=[0-9a-f]{64}$`, sig)
	require.True(t, review.Verify("s3cret", body, sig))
	require.False(t, review.Verify("other", body, sig))
	require.False(t, review.Verify("s3cret", append(body, ' '), sig))
}
