package task_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/task"
)

// running creates a task and takes it to PROVIDER_RUNNING with job "job-1".
func (b *testBundle) running(t *testing.T, key string) task.Task {
	t.Helper()
	cur := b.newTask(t, key)
	inTx(t, b.pool, func(tx pgx.Tx) error {
		var err error
		if cur, err = task.Apply(t.Context(), tx, api, cur, task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("fake")}}); err != nil {
			return err
		}
		cur, err = task.Apply(t.Context(), tx, api, cur, task.Transition{To: task.ProviderRunning,
			Set: task.Fields{ProviderJobID: task.Ptr("job-1")}})
		return err
	})
	return cur
}

// merge offers percent under step 10 and interval 1h.
func (b *testBundle) merge(t *testing.T, cur task.Task, percent int, final bool) bool {
	t.Helper()
	merged, err := task.MergeProgress(t.Context(), b.pool, task.ProgressMerge{TaskID: cur.ID, JobID: "job-1", Percent: percent,
		Step: 10, Interval: time.Hour, Final: final})
	require.NoError(t, err)
	return merged
}

func (b *testBundle) stored(t *testing.T, cur task.Task) (progress int, mergedAt *time.Time) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT progress, progress_updated_at FROM generation_tasks WHERE task_id = $1`,
		cur.ID).Scan(&progress, &mergedAt))
	return progress, mergedAt
}

func TestMergeProgressByStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.running(t, "k")

	require.False(t, b.merge(t, cur, 9, false), "9 points: below the step")
	p, at := b.stored(t, cur)
	require.Equal(t, 0, p)
	require.Nil(t, at)

	require.True(t, b.merge(t, cur, 10, false), "10 points: the step")
	require.False(t, b.merge(t, cur, 19, false))
	require.True(t, b.merge(t, cur, 35, false))
	p, at = b.stored(t, cur)
	require.Equal(t, 35, p)
	require.NotNil(t, at)

	got, err := task.Get(t.Context(), b.pool, cur.ID)
	require.NoError(t, err)
	require.Equal(t, cur.Version, got.Version, "a merge is not a transition: no version bump")
	require.True(t, got.UpdatedAt.Equal(cur.UpdatedAt), "a merge leaves updated_at (the poll interval's clock) alone")
	require.Equal(t, task.ProviderRunning, got.Status)
}

func TestMergeProgressByInterval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.running(t, "k")
	require.True(t, b.merge(t, cur, 20, false))
	require.False(t, b.merge(t, cur, 25, false), "5 points within the interval")

	// The interval passed since the last merge (and since the transition).
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET progress_updated_at = now() - interval '2 hours',
		updated_at = now() - interval '2 hours' WHERE task_id = $1`, cur.ID)
	require.NoError(t, err)
	require.False(t, b.merge(t, cur, 20, false), "the interval passed but the value did not change")
	require.True(t, b.merge(t, cur, 21, false), "the interval passed and the value rose by 1")
	require.False(t, b.merge(t, cur, 22, false), "the merge restarted the interval")
	p, _ := b.stored(t, cur)
	require.Equal(t, 21, p)

	// Before the first merge the interval counts from the last transition.
	fresh := b.running(t, "k2")
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET updated_at = now() - interval '2 hours' WHERE task_id = $1`, fresh.ID)
	require.NoError(t, err)
	require.True(t, b.merge(t, fresh, 3, false))
}

func TestMergeProgressNeverLowers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.running(t, "k")
	require.True(t, b.merge(t, cur, 60, false))
	// Late and out-of-order values, even final ones or after the interval.
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET progress_updated_at = now() - interval '2 hours',
		updated_at = now() - interval '2 hours' WHERE task_id = $1`, cur.ID)
	require.NoError(t, err)
	for _, late := range []int{40, 0, -5, 59, 60} {
		require.False(t, b.merge(t, cur, late, false), "%d", late)
		require.False(t, b.merge(t, cur, late, true), "%d final", late)
	}
	p, _ := b.stored(t, cur)
	require.Equal(t, 60, p)
	require.True(t, b.merge(t, cur, 250, false), "clamped to 100")
	p, _ = b.stored(t, cur)
	require.Equal(t, 100, p)
}

func TestMergeProgressOnlyWhileTheJobRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.running(t, "k")
	require.True(t, b.merge(t, cur, 5, true), "the job's end merges any rise")

	merged, err := task.MergeProgress(t.Context(), b.pool, task.ProgressMerge{TaskID: cur.ID, JobID: "job-0", Percent: 90, Step: 10,
		Interval: time.Hour, Final: true})
	require.NoError(t, err)
	require.False(t, merged, "another job's progress")

	cur, err = task.Get(t.Context(), b.pool, cur.ID)
	require.NoError(t, err)
	inTx(t, b.pool, func(tx pgx.Tx) error { return task.Fail(t.Context(), tx, api, cur, "x", "failed") })
	require.False(t, b.merge(t, cur, 90, false), "no merge after the task ended")
	require.False(t, b.merge(t, cur, 90, true))
	p, _ := b.stored(t, cur)
	require.Equal(t, 5, p)

	queued := b.newTask(t, "k2")
	require.False(t, b.merge(t, queued, 50, true), "no merge before the job runs")
}
