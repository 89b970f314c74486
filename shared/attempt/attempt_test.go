package attempt_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/dbtest"
)

func TestAttemptLifecycle(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	tk := stagetest.NewTask(t, pool, nil)
	ctx := t.Context()

	_, err := attempt.Latest(ctx, pool, tk.ID, attempt.Submitting)
	require.ErrorIs(t, err, attempt.ErrNotFound)

	var first, second attempt.Attempt
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if first, err = attempt.Open(ctx, tx, tk.ID, "sim", "m"); err != nil {
			return err
		}
		second, err = attempt.Open(ctx, tx, tk.ID, "sim", "m")
		return err
	}))
	require.Equal(t, 1, first.No)
	require.Equal(t, 2, second.No)
	require.Equal(t, tk.ID.String()+"-1", first.IdempotencyKey)
	require.Equal(t, tk.ID.String()+"-2", second.IdempotencyKey)
	require.Equal(t, first.ID.String(), first.ClientRequestID)
	require.Equal(t, attempt.Submitting, first.Status)
	require.NotNil(t, first.RequestStartedAt)
	require.Equal(t, *first.RequestStartedAt, first.StartedAt())

	latest, err := attempt.Latest(ctx, pool, tk.ID, attempt.Submitting)
	require.NoError(t, err)
	require.Equal(t, second.ID, latest.ID, "the newest")

	// Lost answer, then found by the reconciler.
	require.NoError(t, attempt.Answer(ctx, pool, first.ID, attempt.SubmitUnknown, "", "timeout_unknown", "no answer"))
	lost, err := attempt.Latest(ctx, pool, tk.ID, attempt.SubmitUnknown)
	require.NoError(t, err)
	require.Equal(t, "timeout_unknown", lost.ErrorCode)
	require.NotNil(t, lost.ResponseAt)
	require.NoError(t, attempt.Found(ctx, pool, first.ID, "job-1"))
	byJob, err := attempt.OfJob(ctx, pool, tk.ID, "job-1")
	require.NoError(t, err)
	require.Equal(t, first.ID, byJob.ID)
	require.Equal(t, attempt.Accepted, byJob.Status)
	byProvider, err := attempt.OfProviderJob(ctx, pool, "sim", "job-1")
	require.NoError(t, err)
	require.Equal(t, tk.ID, byProvider.TaskID)
	_, err = attempt.OfProviderJob(ctx, pool, "other", "job-1")
	require.ErrorIs(t, err, attempt.ErrNotFound)

	require.NoError(t, attempt.End(ctx, pool, tk.ID, "job-1", attempt.Failed, "provider.job_failed", "boom"))
	require.NoError(t, attempt.Reopen(ctx, pool, second.ID))
	require.NoError(t, attempt.NoteRefusal(ctx, pool, second.ID, "rate_limited", "429", true))

	all, err := attempt.List(ctx, pool, tk.ID)
	require.NoError(t, err)
	require.Len(t, all, 2)
	require.Equal(t, attempt.Failed, all[0].Status)
	require.Equal(t, "provider.job_failed", all[0].ErrorCode)
	require.Equal(t, attempt.Submitting, all[1].Status, "a refusal keeps the attempt open")
	require.Equal(t, "rate_limited", all[1].ErrorCode)
	got, err := attempt.Get(ctx, pool, tk.ID, second.ID)
	require.NoError(t, err)
	require.Equal(t, all[1], got)
}
