package api_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

func TestProviderCallbacks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, key := b.tenant(t, 1000, tenant.RoleTenant)
	id := b.createTask(t, key)
	b.move(t, id, task.Submitting, task.ProviderRunning)
	_, err := b.pool.Exec(t.Context(), `INSERT INTO task_attempts
		(task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status)
		VALUES ($1, 1, $2, 'acme/video-1', 'idem-1', 'crid-1', 'job-1', 'ACCEPTED')`, id, fakeProvider)
	require.NoError(t, err)
	callback := func(provider, signature, body string) response {
		return b.do(t, http.MethodPost, "/v1/provider-callbacks/"+provider, "", body, "X-Signature", signature)
	}

	t.Run("bad signature", func(t *testing.T) {
		r := callback(fakeProvider, "forged", `{"id":"job-1"}`)
		require.Equal(t, http.StatusUnauthorized, r.status)
		require.Equal(t, "invalid_signature", r.errorCode(t))
	})
	t.Run("malformed", func(t *testing.T) {
		r := callback(fakeProvider, "good", `not json`)
		require.Equal(t, http.StatusBadRequest, r.status)
		require.Equal(t, "invalid_callback", r.errorCode(t))
	})
	t.Run("unknown provider", func(t *testing.T) {
		r := callback("nobody", "good", `{"id":"job-1"}`)
		require.Equal(t, http.StatusNotFound, r.status)
		require.Equal(t, "unknown_provider", r.errorCode(t))
	})
	t.Run("too large", func(t *testing.T) {
		r := callback(fakeProvider, "good", `{"id":"`+string(make([]byte, maxBodyBytes))+`"}`)
		require.Equal(t, http.StatusRequestEntityTooLarge, r.status)
	})
	t.Run("unknown job", func(t *testing.T) {
		r := callback(fakeProvider, "good", `{"id":"job-of-someone-else"}`)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	})
	t.Run("our job id, another attempt's job", func(t *testing.T) {
		// A provider that reused job-1 for another request (a restarted
		// simulator did): the callback carries that request's id.
		before := stagetest.IdentityMismatches(t, fakeProvider, provider.CheckedAtCallback)
		r := callback(fakeProvider, "good", `{"id":"job-1","client_request_id":"crid-of-another-run"}`)
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
		require.Equal(t, before+1, stagetest.IdentityMismatches(t, fakeProvider, provider.CheckedAtCallback))
	})
	require.Empty(t, b.outboxPayloads(t, id, catalog.EventCallbackReceived), "nothing is written for refused callbacks")

	r := callback(fakeProvider, "good", `{"id":"job-1","client_request_id":"crid-1"}`)
	require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	require.Equal(t, []map[string]any{{"provider": fakeProvider, "provider_job_id": "job-1"}},
		b.outboxPayloads(t, id, catalog.EventCallbackReceived))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2 AND topic = $3`,
		id.String(), catalog.EventCallbackReceived, catalog.GenerationCallback.Name))
}

func TestAdminCreatesTenants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, tenantKey := b.tenant(t, 0, tenant.RoleTenant)
	_, adminKey := b.tenant(t, 0, tenant.RoleAdmin)
	body := `{"name":"new customer","priority":5,"credits":250}`

	r := b.do(t, http.MethodPost, "/v1/admin/tenants", tenantKey, body)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Equal(t, "forbidden", r.errorCode(t))
	r = b.do(t, http.MethodPost, "/v1/admin/tenants", "", body)
	require.Equal(t, http.StatusUnauthorized, r.status)
	r = b.do(t, http.MethodPost, "/v1/admin/tenants", adminKey, `{"name":" ","credits":1}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_field", r.errorCode(t))
	r = b.do(t, http.MethodPost, "/v1/admin/tenants", adminKey, `{"name":"x","role":"admin"}`)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "unknown_field", r.errorCode(t))

	r = b.do(t, http.MethodPost, "/v1/admin/tenants", adminKey, body)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	require.Equal(t, "no-store", r.header.Get("Cache-Control"))
	created := r.json(t)
	newKey := created["api_key"].(string)
	require.Regexp(t, `^avk_`, newKey)

	// The key works, as a tenant key, with the credits given.
	require.Equal(t, http.StatusAccepted, b.create(t, newKey, "k", validBody).status)
	require.Equal(t, http.StatusForbidden, b.do(t, http.MethodPost, "/v1/admin/tenants", newKey, body).status)
	require.Equal(t, 250, b.count(t, `SELECT balance FROM credit_accounts WHERE tenant_id = $1`, created["tenant_id"]))
	require.Equal(t, 5, b.count(t, `SELECT priority FROM tenants WHERE tenant_id = $1`, created["tenant_id"]))
}
