package api_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestGetShowsAttemptsAndOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.ProviderRunning)
	_, err := b.pool.Exec(t.Context(), `INSERT INTO task_attempts
		(task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status, error_code, request_started_at)
		VALUES ($1, 1, 'fakeprov', 'acme/video-1', 'secret-idem-1', 'crid-1', 'job-1', 'REJECTED', 'rate_limited', now()),
		       ($1, 2, 'fakeprov', 'acme/video-1', 'secret-idem-2', 'crid-2', 'job-2', 'ACCEPTED', NULL, now())`, id)
	require.NoError(t, err)
	var assetID uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `INSERT INTO assets
		(tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type, duration_ms, width, height)
		VALUES ($1, $2, 'SOURCE', 'out/video.mp4', decode(repeat('00', 32), 'hex'), 1234, 'video/mp4', 4000, 1280, 720)
		RETURNING asset_id`, tenantID, id).Scan(&assetID))

	r := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	got := r.json(t)
	require.Equal(t, "PROVIDER_RUNNING", got["status"])
	require.EqualValues(t, 3, got["version"])
	require.EqualValues(t, 0, got["progress"])
	require.Nil(t, got["error"])

	attempts := got["attempts"].([]any)
	require.Len(t, attempts, 2)
	first := attempts[0].(map[string]any)
	require.EqualValues(t, 1, first["attempt_no"])
	require.Equal(t, "REJECTED", first["status"])
	require.Equal(t, "fakeprov", first["provider"])
	require.Equal(t, "rate_limited", first["error_code"])
	require.NotContains(t, string(r.body), "secret-idem", "the provider idempotency key stays inside")

	outputs := got["outputs"].([]any)
	require.Len(t, outputs, 1)
	out := outputs[0].(map[string]any)
	require.Equal(t, assetID.String(), out["asset_id"])
	require.Equal(t, "video/mp4", out["content_type"])
	require.EqualValues(t, 1280, out["width"])
	require.Equal(t, "https://blob.test/out/video.mp4?expires=15m0s", out["download_url"])
	require.NotEmpty(t, out["download_url_expires_at"])
}

func TestGetShowsTheError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'FAILED', version = version + 1,
		error_code = 'provider_rejected', error_message = 'the provider refused the prompt' WHERE task_id = $1`, id)
	require.NoError(t, err)

	got := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "").json(t)
	require.Equal(t, "FAILED", got["status"])
	require.Equal(t, map[string]any{"code": "provider_rejected", "message": "the provider refused the prompt"}, got["error"])
	require.Equal(t, []any{}, got["attempts"])
	require.Equal(t, []any{}, got["outputs"])
}

func TestAnotherTenantsTaskIsNotFound(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, keyA := b.tenant(t, 1000, tenant.RoleTenant)
	_, keyB := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, keyA)

	theirs := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), keyB, "")
	missing := b.do(t, http.MethodGet, "/v1/generations/"+uuid.NewString(), keyB, "")
	require.Equal(t, http.StatusNotFound, theirs.status)
	require.Equal(t, "not_found", theirs.errorCode(t))
	require.Equal(t, string(missing.body), string(theirs.body), "another tenant's task reads exactly like a missing one")
	require.NotContains(t, string(theirs.body), "a cat surfing")

	cancel := b.do(t, http.MethodPost, "/v1/generations/"+id.String()+"/cancel", keyB, "")
	require.Equal(t, http.StatusNotFound, cancel.status)
	require.Equal(t, string(missing.body), string(cancel.body))

	mine := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), keyA, "")
	require.Equal(t, http.StatusOK, mine.status)
	require.Equal(t, "a cat surfing at dawn", mine.json(t)["prompt"])
}

func TestGetWithAMalformedIDIs400(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 0, tenant.RoleTenant)
	for _, id := range []string{"nope", "0190c0de00007000800000000000000", "0190c0de-0000-7000-8000-00000000000g"} {
		r := b.do(t, http.MethodGet, "/v1/generations/"+id, key, "")
		require.Equal(t, http.StatusBadRequest, r.status, id)
		require.Equal(t, "invalid_id", r.errorCode(t))
	}
}

func TestGetShowsLiveProgressWhileTheProviderRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	queued := b.createTask(t, key)
	running := b.createTask(t, key)
	b.move(t, running, task.Submitting, task.ProviderRunning)
	for _, id := range []uuid.UUID{queued, running} {
		// The key expires by itself: no cleanup.
		require.NoError(t, live.SetProgress(t.Context(), b.rdb, id, 42, time.Minute))
	}

	got := b.do(t, http.MethodGet, "/v1/generations/"+running.String(), key, "").json(t)
	require.Equal(t, "PROVIDER_RUNNING", got["status"])
	require.EqualValues(t, 42, got["progress"], "the poll stage's progress, not the column's 0")

	got = b.do(t, http.MethodGet, "/v1/generations/"+queued.String(), key, "").json(t)
	require.EqualValues(t, 0, got["progress"], "live progress counts only while the provider runs")

	other := b.createTask(t, key)
	b.move(t, other, task.Submitting, task.ProviderRunning)
	got = b.do(t, http.MethodGet, "/v1/generations/"+other.String(), key, "").json(t)
	require.EqualValues(t, 0, got["progress"], "no live progress recorded: the column")
}

func TestGetFallsBackToTheStoredProgressWhenRedisFails(t *testing.T) {
	t.Parallel()
	rdb := stagetest.NewRedis(t)
	b := setupWith(t, dbtest.TestSchema(t), rdb)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.ProviderRunning)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET progress = 7 WHERE task_id = $1`, id)
	require.NoError(t, err)
	require.NoError(t, rdb.Close())

	r := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	require.EqualValues(t, 7, r.json(t)["progress"])
}
