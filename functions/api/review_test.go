package api_test

import (
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/tenant"
)

// TestGetShowsARejectedReviewAndServesNoDownload: a task whose output the
// content review rejected shows the review, its reason and the error, and
// hands out no download URL (README, "Content review").
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
