package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/progress"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// TestGetAnswersTheMergedProgressAfterRedisLostItsData: a redis-server of
// the test's own is killed and started again empty, as a Redis restart
// does; GET /v1/generations/{id} then answers what the poll stage merged
// into PostgreSQL, not 0.
func TestGetAnswersTheMergedProgressAfterRedisLostItsData(t *testing.T) {
	t.Parallel()
	srv := servicetest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b := setupWith(t, dbtest.TestSchema(t), rdb)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.ProviderRunning)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'fake', provider_job_id = 'job-1' WHERE task_id = $1`, id)
	require.NoError(t, err)
	cur, err := task.Get(t.Context(), b.pool, id)
	require.NoError(t, err)

	// The poll stage's records, as it makes them: 12 is merged (step 10),
	// 18 stays in Redis.
	p := progress.Params{Pool: b.pool, Redis: rdb, TTL: time.Minute}
	for _, percent := range []int{4, 12, 18} {
		_, err := progress.Record(t.Context(), p, cur, percent, false)
		require.NoError(t, err)
	}
	progressOf := func() any {
		r := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "")
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		return r.json(t)["progress"]
	}
	require.EqualValues(t, 18, progressOf(), "the live value, above the stored 12")

	srv.Restart(t)
	_, ok, err := live.Progress(t.Context(), rdb, id)
	require.NoError(t, err)
	require.False(t, ok, "the new Redis is empty")
	require.EqualValues(t, 12, progressOf(), "the merged value survives the Redis restart")

	// A live value below the stored one (a late poll) does not pull it down.
	require.NoError(t, live.SetProgress(t.Context(), rdb, id, 3, time.Minute))
	require.EqualValues(t, 12, progressOf(), "max(live, stored)")
}

// TestGetNeverAnswersLessThanTheStoredProgress: the live value decorates
// the stored one only when it is higher.
func TestGetNeverAnswersLessThanTheStoredProgress(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.ProviderRunning)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET progress = 50 WHERE task_id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, live.SetProgress(t.Context(), b.rdb, id, 30, time.Minute))
	got := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "").json(t)
	require.EqualValues(t, 50, got["progress"])
}
