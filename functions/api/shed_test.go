package api_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/tenant"
)

// TestBrokerDownShedsLowPriorityCreates: with the outbox not draining, the
// API keeps taking generations until the oldest unpublished event is older
// than API_SHED_AFTER; then low-priority tenants get 503 with Retry-After,
// while high-priority tenants, every read, cancels and downloads keep
// working.
func TestBrokerDownShedsLowPriorityCreates(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	srv := api.New(api.Options{Pool: pool, Redis: stagetest.NewRedis(t), Blob: fakePresigner{},
		Limits: config.API{MaxBodyBytes: maxBodyBytes, MaxPromptChars: maxPromptChars, DownloadTTL: 15 * time.Minute,
			ShedAfter: 30 * time.Second, ShedBelow: 5},
		Models: []string{testModel}, Price: billing.Price{DefaultPerSecond: pricePerSecond}, Replay: replay.NewDesk(pool, nil, nil),
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	b := &testBundle{pool: pool, srv: srv, http: hs}

	newTenant := func(priority int) string {
		var c tenant.Created
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			var err error
			c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "t", Priority: priority, Credits: 1000}, tenant.RoleTenant)
			return err
		}))
		return c.Key
	}
	low, high := newTenant(0), newTenant(9)

	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	// The broker is up: everyone creates; the events wait in the outbox.
	id := b.createTask(t, low)
	toCancel, done := b.createTask(t, low), b.createTask(t, low)
	_, err := pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'SUCCEEDED' WHERE task_id = $1`, done)
	require.NoError(t, err)
	var output uuid.UUID
	require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO assets
		(tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type, duration_ms, width, height)
		SELECT tenant_id, task_id, 'SOURCE', 'out/shed.mp4', decode(repeat('00', 32), 'hex'), 1234, 'video/mp4', 4000, 1280, 720
		FROM generation_tasks WHERE task_id = $1 RETURNING asset_id`, done).Scan(&output))
	// The broker has been down a while: the oldest event is a minute old.
	_, err = pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = now() - interval '1 minute'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return b.create(t, low, uuid.NewString(), validBody).status == http.StatusServiceUnavailable
	}, 10*time.Second, 100*time.Millisecond)
	r := b.create(t, low, uuid.NewString(), validBody)
	require.Equal(t, "overloaded", r.errorCode(t))
	require.Equal(t, "30", r.header.Get("Retry-After"))
	require.Contains(t, r.message(t), "retry after 30 seconds")

	require.Equal(t, http.StatusAccepted, b.create(t, high, uuid.NewString(), validBody).status, "high priority still creates")
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, "/v1/generations/"+id.String(), low, "").status, "reads never shed")
	c := b.cancel(t, low, toCancel)
	require.Equal(t, http.StatusOK, c.status, "a cancel is never shed: %s", c.body)
	require.Equal(t, "CANCELED", c.json(t)["status"])
	g := b.do(t, http.MethodGet, "/v1/generations/"+done.String(), low, "")
	require.Equal(t, http.StatusOK, g.status)
	outputs := g.json(t)["outputs"].([]any)
	require.Len(t, outputs, 1)
	require.Equal(t, "https://blob.test/out/shed.mp4?expires=15m0s", outputs[0].(map[string]any)["download_url"], "downloads are never shed")
	a := b.do(t, http.MethodGet, "/v1/assets/"+output.String(), low, "")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "https://blob.test/out/shed.mp4?expires=15m0s", a.json(t)["download_url"])

	// The relay caught up: creates flow again.
	_, err = pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now()`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return b.create(t, low, uuid.NewString(), validBody).status == http.StatusAccepted
	}, 10*time.Second, 100*time.Millisecond)
}

// TestRendersAreShedFirst: from half of API_SHED_AFTER on, new renders from
// low-priority tenants are refused while their generations still go
// through; high-priority tenants still render.
func TestRendersAreShedFirst(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	srv := api.New(api.Options{Pool: pool, Redis: stagetest.NewRedis(t), Blob: fakePresigner{},
		Limits: config.API{MaxBodyBytes: maxBodyBytes, MaxPromptChars: maxPromptChars, DownloadTTL: 15 * time.Minute,
			ShedAfter: time.Minute, ShedBelow: 5},
		Models: []string{testModel}, Price: billing.Price{DefaultPerSecond: pricePerSecond}, Replay: replay.NewDesk(pool, nil, nil)})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	b := &testBundle{pool: pool, srv: srv, http: hs}
	newTenant := func(priority int) string {
		var c tenant.Created
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			var err error
			c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "t", Priority: priority, Credits: 1000}, tenant.RoleTenant)
			return err
		}))
		return c.Key
	}
	low, high := newTenant(0), newTenant(9)
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	b.createTask(t, low)
	_, err := pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = now() - interval '40 seconds'`)
	require.NoError(t, err)
	render := `{"project_revision_id":"` + uuid.NewString() + `","profile":"720p30-h264"}`
	require.Eventually(t, func() bool {
		return b.postRender(t, low, uuid.NewString(), render).status == http.StatusServiceUnavailable
	}, 10*time.Second, 100*time.Millisecond)
	r := b.postRender(t, low, uuid.NewString(), render)
	require.Equal(t, "overloaded", r.errorCode(t))
	require.Contains(t, r.message(t), "pausing new renders")
	require.Equal(t, http.StatusAccepted, b.create(t, low, uuid.NewString(), validBody).status, "generations are not shed yet")
	require.Equal(t, http.StatusNotFound, b.postRender(t, high, uuid.NewString(), render).status, "a high-priority render is not shed (its revision is unknown)")
}
