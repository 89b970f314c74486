package poll_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// jobSays is a script that answers the n-th Get with jobs[n-1] (the last
// one after that).
func jobSays(jobs ...provider.Job) func(int) (provider.Job, error) {
	return func(n int) (provider.Job, error) { return jobs[min(n, len(jobs))-1], nil }
}

func running(percent int) provider.Job {
	return provider.Job{Status: provider.StatusRunning, Progress: percent}
}

// pollNow makes the chain's poll due a second ago and delivers it.
func (b *testBundle) pollNow(t *testing.T) {
	t.Helper()
	at := time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_poll_at = $2 WHERE task_id = $1`, b.task.ID, at)
	require.NoError(t, err)
	require.NoError(t, b.poll(t, uuid.NewString(), at))
}

// progressIs checks the live and the stored progress.
func (b *testBundle) progressIs(t *testing.T, wantLive, wantStored int, msg string) {
	t.Helper()
	p, ok, err := live.Progress(t.Context(), b.rdb, b.task.ID)
	require.NoError(t, err)
	require.True(t, ok, msg)
	require.Equal(t, wantLive, p, "live: %s", msg)
	require.Equal(t, wantStored, b.reload(t).Progress, "stored: %s", msg)
}

// shown is what one poll leaves: the live and the stored progress.
type shown struct {
	live, stored int
	why          string
}

// pollsShow delivers one due poll per step and checks what it left.
func (b *testBundle) pollsShow(t *testing.T, steps ...shown) {
	t.Helper()
	for _, s := range steps {
		b.pollNow(t)
		b.progressIs(t, s.live, s.stored, s.why)
	}
}

func TestPollsMergeProgressByStep(t *testing.T) {
	t.Parallel()
	// journey leaves PROGRESS_MERGE_STEP and _INTERVAL zero: 10 and 30s.
	b := setup(t, jobSays(running(4), running(12), running(15), running(21), running(22)))
	b.pollsShow(t, shown{4, 0, "4 points: Redis only"}, shown{12, 12, "12 points up: merged"},
		shown{15, 12, "3 points up: Redis only"}, shown{21, 12, "9 points up: Redis only"})

	// 30 s passed since the merge: a value that rose at all is merged.
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET progress_updated_at = now() - interval '31 seconds',
		updated_at = now() - interval '31 seconds' WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
	b.pollsShow(t, shown{22, 22, "the interval passed: merged"})

	got := b.reload(t)
	require.Equal(t, b.task.Version, got.Version, "merges bump no version: the delayed polls' ExpectedVersion holds")
	require.Equal(t, []task.Status{task.Queued, task.Submitting, task.ProviderRunning}, timeline(t, b.pool, b.task.ID))
}

func TestOutOfOrderPollsNeverLowerTheStoredProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, jobSays(running(50), running(30), running(0)))
	b.pollsShow(t, shown{50, 50, "merged"}, shown{30, 50, "a lower answer is not stored"}, shown{0, 50, "nor is 0"})
}

func TestTheJobsEndMergesItsLastProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, jobSays(running(33), provider.Job{Status: provider.StatusFailed, Progress: 37, ErrorCode: "boom"}))
	b.pollsShow(t, shown{33, 33, "merged"})
	b.pollNow(t)
	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, 37, got.Progress, "4 points, but the job ended: merged before the transition")

	// After the end nothing merges: a late answer of the job changes
	// nothing in the row.
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET progress_updated_at = now() - interval '1 hour' WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
	merged, err := task.MergeProgress(t.Context(), b.pool, task.ProgressMerge{TaskID: b.task.ID, JobID: jobID, Percent: 90, Step: 1,
		Interval: time.Second, Final: true})
	require.NoError(t, err)
	require.False(t, merged)
	require.Equal(t, 37, b.reload(t).Progress)
}
