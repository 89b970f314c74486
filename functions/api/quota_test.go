package api_test

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/tenant"
)

// setQuota gives a tenant its own limits; nil leaves one as it is.
func (b *testBundle) setQuota(t *testing.T, tenantID uuid.UUID, maxAssets, maxBytes *int64) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return asset.SetQuota(t.Context(), tx, tenantID, maxAssets, maxBytes)
	}))
}

// TestATenantCannotStorePastItsQuota: past its asset quota a tenant's
// upload, generation and render are refused 409 quota_exceeded naming the
// limit, and nothing is created; a repeat of an upload already made is
// still answered; the byte quota refuses an upload that would pass it.
// Other tenants are not affected.
func TestATenantCannotStorePastItsQuota(t *testing.T) {
	t.Parallel()
	b, _ := setupUploads(t)
	id, key := b.tenant(t, 1_000_000, tenant.RoleTenant)
	_, otherKey := b.tenant(t, 1_000_000, tenant.RoleTenant)
	two := int64(2)
	b.setQuota(t, id, &two, nil)

	clip := []byte("not really a video, twelve")
	first := uuid.NewString()
	require.Equal(t, http.StatusCreated, b.announce(t, key, first, clip, "VIDEO", "video/mp4").status)
	require.Equal(t, http.StatusCreated, b.announce(t, key, uuid.NewString(), clip, "VIDEO", "video/mp4").status)
	r := b.announce(t, key, uuid.NewString(), clip, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusConflict, r.status, "body: %s", r.body)
	require.Equal(t, "quota_exceeded", r.errorCode(t))
	require.Contains(t, r.message(t), "the tenant keeps 2 assets, and its quota is 2")
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM assets WHERE tenant_id = $1`, id), "the refused upload left no row")
	require.Equal(t, http.StatusOK, b.announce(t, key, first, clip, "VIDEO", "video/mp4").status, "a repeat of an upload made is answered")

	r = b.create(t, key, uuid.NewString(), validBody)
	require.Equal(t, http.StatusConflict, r.status, "a generation's output would pass the quota: body %s", r.body)
	require.Equal(t, "quota_exceeded", r.errorCode(t))
	require.Zero(t, b.count(t, `SELECT count(*) FROM generation_tasks WHERE tenant_id = $1`, id))
	require.Zero(t, b.count(t, `SELECT count(*) FROM credit_reservations WHERE tenant_id = $1`, id), "nothing reserved")

	require.Equal(t, http.StatusCreated, b.announce(t, otherKey, uuid.NewString(), clip, "VIDEO", "video/mp4").status, "another tenant is not held back")

	// Back to the deployment's default, the byte quota set just above what
	// is stored: one more byte is refused, naming the bytes.
	def, room := int64(-1), int64(2*len(clip)+5)
	b.setQuota(t, id, &def, &room)
	r = b.announce(t, key, uuid.NewString(), clip, "VIDEO", "video/mp4")
	require.Equal(t, http.StatusConflict, r.status, "body: %s", r.body)
	require.Contains(t, r.message(t), "stored bytes")
	require.Equal(t, http.StatusCreated, b.announce(t, key, uuid.NewString(), clip[:5], "VIDEO", "video/mp4").status, "what fits is taken")
}

// TestTwoUploadsAtOnceCannotBothTakeTheLastPlace: the quota lock makes
// the second of two concurrent uploads see the first's row.
func TestTwoUploadsAtOnceCannotBothTakeTheLastPlace(t *testing.T) {
	t.Parallel()
	b, _ := setupUploads(t)
	id, key := b.tenant(t, 1_000_000, tenant.RoleTenant)
	const tries = 8
	places := int64(3)
	b.setQuota(t, id, &places, nil)
	var wg sync.WaitGroup
	statuses := make([]int, tries)
	for i := range tries {
		wg.Go(func() {
			statuses[i] = b.announce(t, key, uuid.NewString(), []byte("clip"), "VIDEO", "video/mp4").status
		})
	}
	wg.Wait()
	created := 0
	for _, s := range statuses {
		require.Contains(t, []int{http.StatusCreated, http.StatusConflict}, s)
		if s == http.StatusCreated {
			created++
		}
	}
	require.Equal(t, int(places), created, "statuses %v", statuses)
	require.Equal(t, int(places), b.count(t, `SELECT count(*) FROM assets WHERE tenant_id = $1`, id))
}
