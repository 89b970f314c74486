package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/tenant"
)

// TestGetShowsARejectedReviewAndServesNoDownload: a task whose output the
// content review rejected shows the review, its reason and the error, and
// hands out no download URL (docs/journey.md, "Content review").
func TestGetShowsARejectedReviewAndServesNoDownload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	var assetID uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `INSERT INTO assets
		(tenant_id, task_id, kind, status, error_code, error_message, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, 'SOURCE', 'FAILED', 'review.content_rejected', 'rejected', 'out/video.mp4', decode(repeat('00', 32), 'hex'), 1234, 'video/mp4')
		RETURNING asset_id`, tenantID, id).Scan(&assetID))
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'FAILED', version = version + 1,
		error_code = 'review.content_rejected', error_message = 'the content review rejected the output (reason policy.violence)' WHERE task_id = $1`, id)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `INSERT INTO task_reviews (task_id, tenant_id, asset_id, status, decision, reason_code, labels, reviewer, attempts, decided_at)
		VALUES ($1, $2, $3, 'REJECTED', 'reject', 'policy.violence', '{gore}', 'reviewsim', 2, now())`, id, tenantID, assetID)
	require.NoError(t, err)

	r := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "")
	require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
	got := r.json(t)
	require.Equal(t, "FAILED", got["status"])
	require.Equal(t, "review.content_rejected", got["error"].(map[string]any)["code"])
	rv := got["review"].(map[string]any)
	require.Equal(t, "REJECTED", rv["status"])
	require.Equal(t, "reject", rv["decision"])
	require.Equal(t, "policy.violence", rv["reason_code"])
	require.Equal(t, []any{"gore"}, rv["labels"])
	require.EqualValues(t, 2, rv["attempts"])
	require.NotEmpty(t, rv["decided_at"])
	outputs := got["outputs"].([]any)
	require.Len(t, outputs, 1, "the output is listed")
	require.NotContains(t, outputs[0], "download_url", "but never handed out")
}

// TestGetWithoutReviewHasNoReviewObject: review off leaves the answer as
// it was.
func TestGetWithoutReviewHasNoReviewObject(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	got := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "").json(t)
	require.NotContains(t, got, "review")
}

// TestAnOutputTheReviewHasNotApprovedIsNotHandedOut: while a generation's
// content review is pending (or waiting, or unavailable), its READY output
// has no download URL on any endpoint, cannot be cut into a revision and
// cannot be rendered (422 naming the asset and why); once the review
// approves, all of it works.
func TestAnOutputTheReviewHasNotApprovedIsNotHandedOut(t *testing.T) {
	t.Parallel()
	b, store := setupUploads(t)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	out := b.readyVideo(t, store, tenantID)
	// The generation's output, as fetch and probe leave it: READY, probed.
	_, err := b.pool.Exec(t.Context(), `UPDATE assets SET task_id = $2, client_idempotency_key = NULL, request_hash = NULL WHERE asset_id = $1`, out, id)
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `INSERT INTO task_reviews (task_id, tenant_id, asset_id) VALUES ($1, $2, $3)`, id, tenantID, out)
	require.NoError(t, err)
	projectID := b.project(t, key)
	clip := fmt.Sprintf(`{"timeline":{"clips":[{"asset_id":%q,"in":0,"out":3}]}}`, out)

	served := func(status string) (asset, listed, generation bool) {
		t.Helper()
		a := b.do(t, http.MethodGet, "/v1/assets/"+out.String(), key, "")
		require.Equal(t, http.StatusOK, a.status, "body: %s", a.body)
		view := a.json(t)
		require.Equal(t, "READY", view["status"])
		if status != "" {
			require.Equal(t, status, view["held_by_review"])
		} else {
			require.NotContains(t, view, "held_by_review")
		}
		l := b.do(t, http.MethodGet, "/v1/assets", key, "")
		require.Equal(t, http.StatusOK, l.status, "body: %s", l.body)
		items := l.json(t)["assets"].([]any)
		require.Len(t, items, 1)
		g := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "").json(t)
		outputs := g["outputs"].([]any)
		require.Len(t, outputs, 1)
		return view["download_url"] != nil, items[0].(map[string]any)["download_url"] != nil, outputs[0].(map[string]any)["download_url"] != nil
	}
	for _, status := range []string{"PENDING", "WAITING", "UNAVAILABLE"} {
		_, err = b.pool.Exec(t.Context(), `UPDATE task_reviews SET status = $2 WHERE task_id = $1`, id, status)
		require.NoError(t, err)
		a, l, g := served(status)
		require.False(t, a || l || g, "review %s: a download URL was handed out (asset %v, list %v, generation %v)", status, a, l, g)
		r := b.revise(t, key, projectID, clip)
		require.Equal(t, http.StatusUnprocessableEntity, r.status, "body: %s", r.body)
		require.Contains(t, r.message(t), fmt.Sprintf("asset %s is held by the content review of its generation (review %s)", out, status))
	}

	_, err = b.pool.Exec(t.Context(), `UPDATE task_reviews SET status = 'APPROVED', decision = 'approve', decided_at = now() WHERE task_id = $1`, id)
	require.NoError(t, err)
	a, l, g := served("")
	require.True(t, a && l && g, "approved: every endpoint hands out the download (asset %v, list %v, generation %v)", a, l, g)
	gen := b.do(t, http.MethodGet, "/v1/generations/"+id.String(), key, "").json(t)
	for _, url := range []string{b.do(t, http.MethodGet, "/v1/assets/"+out.String(), key, "").json(t)["download_url"].(string),
		gen["outputs"].([]any)[0].(map[string]any)["download_url"].(string)} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment"), "served as an attachment: %q", resp.Header.Get("Content-Disposition"))
		require.Equal(t, "video/mp4", resp.Header.Get("Content-Type"))
	}
	r := b.revise(t, key, projectID, clip)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	render := b.postRender(t, key, uuid.NewString(), fmt.Sprintf(`{"project_revision_id":%q,"profile":"720p30-h264"}`, r.json(t)["revision_id"]))
	require.Equal(t, http.StatusAccepted, render.status, "body: %s", render.body)
}
