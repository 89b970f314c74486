package api_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestCreateIsIdempotentPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)

	first := b.create(t, key, "order-1", validBody)
	require.Equal(t, http.StatusAccepted, first.status, "body: %s", first.body)
	got := first.json(t)
	require.Equal(t, "QUEUED", got["status"])
	require.EqualValues(t, 1, got["version"])
	id := uuid.MustParse(got["task_id"].(string))
	require.Equal(t, "/v1/generations/"+id.String(), first.header.Get("Location"))

	// The same request, spelled differently: other key order, whitespace,
	// the default priority given explicitly.
	same := `{ "resolution": "1280x720", "priority": 0,
		"duration_seconds": 4, "prompt": "a cat surfing at dawn", "model": "acme/video-1" }`
	again := b.create(t, key, "order-1", same)
	require.Equal(t, http.StatusOK, again.status, "body: %s", again.body)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, id.String(), again.json(t)["task_id"])

	other := b.create(t, key, "order-1", strings.Replace(validBody, "a cat", "a dog", 1))
	require.Equal(t, http.StatusConflict, other.status)
	require.Equal(t, "idempotency_conflict", other.errorCode(t))
	require.Contains(t, other.message(t), "order-1")

	// One task, one reservation of its price, one submit event.
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM generation_tasks WHERE tenant_id = $1`, tenantID))
	acct, err := billing.GetAccount(t.Context(), b.pool, tenantID)
	require.NoError(t, err)
	require.EqualValues(t, 4*pricePerSecond, acct.Reserved)
	submits := b.outboxPayloads(t, id, catalog.EventSubmitRequested)
	require.Len(t, submits, 1)
	require.Equal(t, id.String(), submits[0]["task_id"])
	require.EqualValues(t, 1, submits[0]["version"])
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2 AND topic = $3`,
		id.String(), catalog.EventSubmitRequested, catalog.GenerationSubmit.Name))
	require.Len(t, b.outboxPayloads(t, id, catalog.EventTaskStateChanged), 1)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM task_events WHERE task_id = $1`, id))
}

func TestIdempotencyKeysArePerTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, keyA := b.tenant(t, 1000, tenant.RoleTenant)
	_, keyB := b.tenant(t, 1000, tenant.RoleTenant)
	a := b.create(t, keyA, "shared-key", validBody)
	other := b.create(t, keyB, "shared-key", strings.Replace(validBody, "a cat", "a dog", 1))
	require.Equal(t, http.StatusAccepted, a.status)
	require.Equal(t, http.StatusAccepted, other.status, "another tenant's key space is its own")
	require.NotEqual(t, a.json(t)["task_id"], other.json(t)["task_id"])
}

func TestConcurrentCreatesMakeOneTask(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)

	const n = 8
	responses := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { responses[i] = b.create(t, key, "same-key", validBody) })
	}
	wg.Wait()

	accepted, ids := 0, map[any]bool{}
	for _, r := range responses {
		require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, r.status, "body: %s", r.body)
		if r.status == http.StatusAccepted {
			accepted++
		}
		ids[r.json(t)["task_id"]] = true
	}
	require.Equal(t, 1, accepted, "exactly one request creates the task")
	require.Len(t, ids, 1, "every request sees the same task")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM generation_tasks WHERE tenant_id = $1`, tenantID))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM credit_reservations WHERE tenant_id = $1`, tenantID))
	acct, err := billing.GetAccount(t.Context(), b.pool, tenantID)
	require.NoError(t, err)
	require.EqualValues(t, 4*pricePerSecond, acct.Reserved)
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_events WHERE event_type = $1 AND tenant_id = $2`,
		catalog.EventSubmitRequested, tenantID))
}

func TestCreateWithoutEnoughCreditsIs402(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 50, tenant.RoleTenant)

	body := strings.Replace(validBody, `"duration_seconds":4`, `"duration_seconds":10`, 1)
	r := b.create(t, key, "k", body)
	require.Equal(t, http.StatusPaymentRequired, r.status, "body: %s", r.body)
	require.Equal(t, "insufficient_credits", r.errorCode(t))
	msg := r.message(t)
	require.Contains(t, msg, "needs 100 credits")
	require.Contains(t, msg, "only 50 are available")

	// Nothing stays behind, so the same key works after a top-up.
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM generation_tasks WHERE tenant_id = $1`, tenantID))
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM outbox_events WHERE tenant_id = $1`, tenantID))
	ok := b.create(t, key, "k", validBody) // 40 credits
	require.Equal(t, http.StatusAccepted, ok.status, "body: %s", ok.body)
}

func TestCreateChecksInputAssetsBelongToTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ownerID, _ := b.tenant(t, 0, tenant.RoleTenant)
	tenantID, key := b.tenant(t, 1000, tenant.RoleTenant)
	var assetID uuid.UUID
	require.NoError(t, b.pool.QueryRow(t.Context(), `INSERT INTO assets (tenant_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, 'SOURCE', 'tenants/x/a.png', decode(repeat('00', 32), 'hex'), 1, 'image/png') RETURNING asset_id`, ownerID).Scan(&assetID))

	body := strings.Replace(validBody, `}`, `,"input_asset_ids":["`+assetID.String()+`"]}`, 1)
	r := b.create(t, key, "k", body)
	require.Equal(t, http.StatusBadRequest, r.status, "body: %s", r.body)
	require.Equal(t, "invalid_field", r.errorCode(t))
	require.Contains(t, r.message(t), "does not exist")
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM generation_tasks WHERE tenant_id = $1`, tenantID))
}
