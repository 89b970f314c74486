package progress_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/progress"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
)

// privateRedis starts a redis-server of the test's own and a client of it.
func privateRedis(t *testing.T) (*servicetest.Redis, *redis.Client) {
	t.Helper()
	srv := servicetest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return srv, rdb
}

func runningTask(t *testing.T, params progress.Params) task.Task {
	t.Helper()
	return stagetest.NewTask(t, params.Pool, nil,
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("fake")}},
		task.Transition{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr("job-1")}})
}

// TestProgressOutlivesARedisRestart: a real redis-server loses every key;
// what was merged is still what a reader shows.
func TestProgressOutlivesARedisRestart(t *testing.T) {
	t.Parallel()
	srv, rdb := privateRedis(t)
	p := progress.Params{Pool: dbtest.TestSchema(t), Redis: rdb, TTL: time.Minute}
	cur := runningTask(t, p)

	for _, step := range []struct {
		percent int
		merged  bool
	}{{4, false}, {12, true}, {18, false}} {
		merged, err := progress.Record(t.Context(), p, cur, step.percent, false)
		require.NoError(t, err)
		require.Equal(t, step.merged, merged, "%d", step.percent)
	}
	cur, err := task.Get(t.Context(), p.Pool, cur.ID)
	require.NoError(t, err)
	require.Equal(t, 12, cur.Progress)
	shown, err := progress.Of(t.Context(), rdb, cur)
	require.NoError(t, err)
	require.Equal(t, 18, shown, "the live value, above the stored one")

	srv.Restart(t)
	_, ok, err := live.Progress(t.Context(), rdb, cur.ID)
	require.NoError(t, err)
	require.False(t, ok, "the new Redis is empty")
	shown, err = progress.Of(t.Context(), rdb, cur)
	require.NoError(t, err)
	require.Equal(t, 12, shown, "the merged value, not 0")

	// Polls go on against the new Redis.
	merged, err := progress.Record(t.Context(), p, cur, 19, false)
	require.NoError(t, err)
	require.False(t, merged)
	shown, err = progress.Of(t.Context(), rdb, cur)
	require.NoError(t, err)
	require.Equal(t, 19, shown)
}

// TestRecordMergesWhenRedisIsDown: Redis failing costs the live value, not
// the merge.
func TestRecordMergesWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	_, rdb := privateRedis(t)
	p := progress.Params{Pool: dbtest.TestSchema(t), Redis: rdb, TTL: time.Minute}
	cur := runningTask(t, p)
	require.NoError(t, rdb.Close())

	merged, err := progress.Record(t.Context(), p, cur, 40, false)
	require.Error(t, err, "the Redis write failed")
	require.True(t, merged, "the merge did not")
	cur, err = task.Get(t.Context(), p.Pool, cur.ID)
	require.NoError(t, err)
	require.Equal(t, 40, cur.Progress)

	shown, err := progress.Of(t.Context(), rdb, cur)
	require.Error(t, err)
	require.Equal(t, 40, shown, "a reader falls back to the stored value")
}

// TestOfShowsTheStoredProgressOutsidePROVIDER_RUNNING: live values count
// only while the provider runs.
func TestOfShowsTheStoredProgressOutsidePROVIDER_RUNNING(t *testing.T) {
	t.Parallel()
	rdb := stagetest.NewRedis(t)
	cur := stagetest.NewTask(t, dbtest.TestSchema(t), nil)
	require.NoError(t, live.SetProgress(t.Context(), rdb, cur.ID, 42, time.Minute))
	shown, err := progress.Of(t.Context(), rdb, cur)
	require.NoError(t, err)
	require.Equal(t, 0, shown)
}
