package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/render"
)

func (b *testBundle) postRender(t *testing.T, key, idem, body string) response {
	t.Helper()
	return b.do(t, http.MethodPost, "/v1/renders", key, body, "Content-Type", "application/json", "Idempotency-Key", idem)
}

// TestRendersAreRequestedReadAndCanceled: a render is accepted with its
// reservation (priced by output seconds and profile) and its first event
// in one transaction; the same key and body is the same render, another
// body 409; another tenant reads it as missing; a cancel ends it and asks
// billing to release, and a second cancel is 409.
func TestRendersAreRequestedReadAndCanceled(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	tenantID, key := stagetest.NewTenant(t, b.pool)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		_, err := billing.TopUp(t.Context(), tx, tenantID, 100, "renders-test")
		return err
	}))
	a := b.readyVideo(t, store, tenantID)
	projectID := b.project(t, key)
	r := b.revise(t, key, projectID, fmt.Sprintf(`{"timeline":{"clips":[{"asset_id":%q,"in":0,"out":7.5}]}}`, a))
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	revision := r.json(t)["revision_id"].(string)
	body := fmt.Sprintf(`{"project_revision_id":%q,"profile":"1080p30-h264"}`, revision)

	r = b.postRender(t, key, "render-1", body)
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	created := r.json(t)
	require.Equal(t, "QUEUED", created["status"])
	id := uuid.MustParse(created["render_id"].(string))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_reservations WHERE render_job_id = $1 AND amount = 16 AND status = 'HELD'`, id),
		"8 started seconds at 2 credits")
	require.Len(t, b.outboxPayloads(t, id, catalog.EventRenderRequested), 1)
	require.Len(t, b.outboxPayloads(t, id, catalog.EventTaskStateChanged), 1, "QUEUED reaches the event stream")

	again := b.postRender(t, key, "render-1", body)
	require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
	require.Equal(t, created["render_id"], again.json(t)["render_id"])
	other := b.postRender(t, key, "render-1", fmt.Sprintf(`{"project_revision_id":%q,"profile":"720p30-h264"}`, revision))
	require.Equal(t, http.StatusConflict, other.status)
	require.Equal(t, "idempotency_conflict", other.errorCode(t))

	got := b.do(t, http.MethodGet, "/v1/renders/"+id.String(), key, "")
	require.Equal(t, http.StatusOK, got.status, "body: %s", got.body)
	view := got.json(t)
	require.Equal(t, "QUEUED", view["status"])
	require.EqualValues(t, 7.5, view["duration_seconds"])
	require.Nil(t, view["output"])
	_, otherKey := stagetest.NewTenant(t, b.pool)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodGet, "/v1/renders/"+id.String(), otherKey, "").status)
	require.Equal(t, http.StatusNotFound, b.do(t, http.MethodPost, "/v1/renders/"+id.String()+"/cancel", otherKey, "").status)

	c := b.do(t, http.MethodPost, "/v1/renders/"+id.String()+"/cancel", key, "")
	require.Equal(t, http.StatusOK, c.status, "body: %s", c.body)
	require.Equal(t, "CANCELED", c.json(t)["status"])
	settle := b.outboxPayloads(t, id, catalog.EventSettleRequested)
	require.Len(t, settle, 1)
	require.Equal(t, id.String(), settle[0]["render_id"])
	c = b.do(t, http.MethodPost, "/v1/renders/"+id.String()+"/cancel", key, "")
	require.Equal(t, http.StatusConflict, c.status)
	require.Equal(t, "render_finished", c.errorCode(t))
	j, err := render.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	require.Equal(t, render.Canceled, j.Status)
}

// TestBadRenderRequestsAreRefused: each mistake answers a 4xx that says
// what to do, and writes nothing.
func TestBadRenderRequestsAreRefused(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	tenantID, key := stagetest.NewTenant(t, b.pool) // stagetest.Credits: too few for a long render
	a := b.readyVideo(t, store, tenantID)
	projectID := b.project(t, key)
	r := b.revise(t, key, projectID, fmt.Sprintf(`{"timeline":{"clips":[{"asset_id":%q,"in":0,"out":10},{"asset_id":%q,"in":0,"out":10},{"asset_id":%q,"in":0,"out":10},{"asset_id":%q,"in":0,"out":10},{"asset_id":%q,"in":0,"out":10},{"asset_id":%q,"in":0,"out":10}]}}`, a, a, a, a, a, a))
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	revision := r.json(t)["revision_id"].(string)
	for name, c := range map[string]struct {
		body   string
		status int
		code   string
	}{
		"no revision":      {`{"profile":"1080p30-h264"}`, http.StatusBadRequest, "invalid_field"},
		"unknown profile":  {fmt.Sprintf(`{"project_revision_id":%q,"profile":"4k"}`, revision), http.StatusBadRequest, "invalid_field"},
		"unknown revision": {fmt.Sprintf(`{"project_revision_id":%q,"profile":"720p30-h264"}`, uuid.New()), http.StatusNotFound, "not_found"},
		"too few credits":  {fmt.Sprintf(`{"project_revision_id":%q,"profile":"1080p30-h264"}`, revision), http.StatusPaymentRequired, "insufficient_credits"},
		"unknown field":    {fmt.Sprintf(`{"project_revision_id":%q,"profile":"720p30-h264","fps":60}`, revision), http.StatusBadRequest, "unknown_field"},
	} {
		r := b.postRender(t, key, uuid.NewString(), c.body)
		require.Equal(t, c.status, r.status, "%s: %s", name, r.body)
		require.Equal(t, c.code, r.errorCode(t), name)
	}
	require.Zero(t, b.count(t, `SELECT count(*) FROM render_jobs WHERE tenant_id = $1`, tenantID))
	require.Equal(t, http.StatusBadRequest, b.do(t, http.MethodPost, "/v1/renders", key, `{}`, "Content-Type", "application/json").status,
		"no Idempotency-Key")
}
