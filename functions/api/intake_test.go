package api_test

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/tenant"
)

// tenantOf creates a tenant of priority with credits to spare and returns
// its key.
func (b *testBundle) tenantOf(t *testing.T, priority int) string {
	t.Helper()
	var c tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "t", Priority: priority, Credits: 1_000_000}, tenant.RoleTenant)
		return err
	}))
	return c.Key
}

func intakeLimits(rate map[int]float64, burst map[int]int) func(*api.Options) {
	return func(o *api.Options) {
		o.Limits.TenantRate, o.Limits.TenantBurst = rate, burst
	}
}

// TestIntakeIsLimitedPerTenant: a tenant starts at most its priority
// class's burst at once and its rate after; the request over it is 429
// rate_limited with Retry-After and the RateLimit headers and creates
// nothing; another tenant's bucket and a higher class are not touched,
// reads are never limited, and the bucket refills.
func TestIntakeIsLimitedPerTenant(t *testing.T) {
	t.Parallel()
	b := setupWith(t, dbtest.TestSchema(t), stagetest.NewRedis(t),
		intakeLimits(map[int]float64{0: 0.5, 5: 100}, map[int]int{0: 2, 5: 50}))
	low, otherLow, high := b.tenantOf(t, 0), b.tenantOf(t, 3), b.tenantOf(t, 9)

	first := b.create(t, low, uuid.NewString(), validBody)
	require.Equal(t, http.StatusAccepted, first.status, "%s", first.body)
	require.Equal(t, `"tenant";q=2;w=4`, first.header.Get("RateLimit-Policy"), "burst 2, refilled from empty in 4 s at 0.5/s")
	require.Equal(t, http.StatusAccepted, b.create(t, low, uuid.NewString(), validBody).status)

	over := b.create(t, low, uuid.NewString(), validBody)
	require.Equal(t, http.StatusTooManyRequests, over.status, "%s", over.body)
	require.Equal(t, api.CodeRateLimited, over.errorCode(t))
	retry, err := strconv.Atoi(over.header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, retry >= 1 && retry <= 2, "Retry-After %d: one start comes back every 2 s", retry)
	require.Contains(t, over.message(t), "0.5 new generations, renders or uploads per second, 2 at once")
	require.Regexp(t, `^"tenant";r=0;t=[1-4]$`, over.header.Get("RateLimit"))
	var tasks int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM generation_tasks`).Scan(&tasks))
	require.Equal(t, 2, tasks, "a refused create creates nothing")

	require.Equal(t, http.StatusAccepted, b.create(t, otherLow, uuid.NewString(), validBody).status, "each tenant has its own bucket")
	for range 5 {
		r := b.create(t, high, uuid.NewString(), validBody)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.Equal(t, `"tenant";q=50;w=1`, r.header.Get("RateLimit-Policy"), "priority 9 is in class 5")
	}
	id := uuid.MustParse(first.json(t)["task_id"].(string))
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/generations/"+id.String(), low, "").status, "reads are not limited")

	require.Eventually(t, func() bool {
		return b.create(t, low, uuid.NewString(), validBody).status == http.StatusAccepted
	}, 10*time.Second, 200*time.Millisecond, "the bucket refills at the class's rate")
}

// TestIntakeSlowsLowPriorityFirstUnderBacklog: from half of API_SHED_AFTER
// on, a tenant below API_SHED_BELOW_PRIORITY gets a quarter of its class's
// rate, while a tenant at or above it keeps the whole rate, and
// generations of both still go through.
func TestIntakeSlowsLowPriorityFirstUnderBacklog(t *testing.T) {
	t.Parallel()
	b := setupWith(t, dbtest.TestSchema(t), stagetest.NewRedis(t),
		intakeLimits(map[int]float64{0: 4}, map[int]int{0: 8}),
		func(o *api.Options) { o.Limits.ShedAfter, o.Limits.ShedBelow = time.Minute, 5 })
	low, high := b.tenantOf(t, 0), b.tenantOf(t, 9)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = b.srv.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	r := b.create(t, low, uuid.NewString(), validBody)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	require.Equal(t, `"tenant";q=8;w=2`, r.header.Get("RateLimit-Policy"), "no backlog: the class's whole rate")

	_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = now() - interval '40 seconds'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		r := b.create(t, low, uuid.NewString(), validBody)
		return r.status == http.StatusAccepted && r.header.Get("RateLimit-Policy") == `"tenant";q=8;w=8`
	}, 10*time.Second, 100*time.Millisecond, "under backlog pressure the low-priority tenant refills at 1/s")
	h := b.create(t, high, uuid.NewString(), validBody)
	require.Equal(t, http.StatusAccepted, h.status, "%s", h.body)
	require.Equal(t, `"tenant";q=8;w=2`, h.header.Get("RateLimit-Policy"), "a high-priority tenant keeps its rate")

	var over response
	require.Eventually(t, func() bool {
		over = b.create(t, low, uuid.NewString(), validBody)
		return over.status == http.StatusTooManyRequests
	}, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, over.message(t), "lower-priority tenants are slowed down first")
}

// TestIntakeLetsWorkInWhenRedisIsDown: a limiter that cannot reach Redis
// lets the create through and counts it, instead of refusing every tenant.
func TestIntakeLetsWorkInWhenRedisIsDown(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	b := setupWith(t, dbtest.TestSchema(t), down,
		intakeLimits(map[int]float64{0: 1}, map[int]int{0: 1}),
		func(o *api.Options) { o.Registerer = reg })
	key := b.tenantOf(t, 0)
	for range 3 {
		r := b.create(t, key, uuid.NewString(), validBody)
		require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
		require.Empty(t, r.header.Get("RateLimit"), "no bucket was read")
	}
	families, err := reg.Gather()
	require.NoError(t, err)
	var unchecked float64
	for _, f := range families {
		if f.GetName() == "api_intake_unchecked_total" {
			unchecked = f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	require.Equal(t, 3.0, unchecked)
}
