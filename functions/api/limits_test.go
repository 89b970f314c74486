package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/tenant"
)

// with returns validBody with one field's JSON value replaced, or the field
// removed when value is "".
func with(field, value string) string {
	fields := map[string]string{
		"model": `"acme/video-1"`, "prompt": `"a cat"`, "duration_seconds": `4`, "resolution": `"1280x720"`,
	}
	if value == "" {
		delete(fields, field)
	} else {
		fields[field] = value
	}
	var parts []string
	for _, k := range []string{"model", "prompt", "duration_seconds", "resolution", "priority", "input_asset_ids", "colour"} {
		if v, ok := fields[k]; ok {
			parts = append(parts, `"`+k+`":`+v)
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func TestCreateLimits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	tenantID, key := b.tenant(t, 1_000_000, tenant.RoleTenant)

	tests := []struct {
		name     string
		body     string
		headers  []string // replace the default Idempotency-Key and Content-Type
		status   int
		code     string
		contains string // in the message
	}{
		{"body over the limit", with("prompt", `"`+strings.Repeat("a", maxBodyBytes)+`"`), nil, 413, "body_too_large", "4096 bytes"},
		{"whitespace past the limit", validBody + strings.Repeat(" ", maxBodyBytes), nil, 413, "body_too_large", ""},
		{"unknown field", with("colour", `"red"`), nil, 400, "unknown_field", `"colour"`},
		{"trailing garbage", validBody + `garbage`, nil, 400, "malformed_json", "after its JSON object"},
		{"two objects", validBody + validBody, nil, 400, "malformed_json", "after its JSON object"},
		{"empty body", "", nil, 400, "malformed_json", "empty"},
		{"not an object", `["a"]`, nil, 400, "malformed_json", "JSON object"},
		{"syntax error", `{"model": }`, nil, 400, "malformed_json", "not valid JSON"},
		{"truncated", `{"model": "acme/video-1"`, nil, 400, "malformed_json", "ends in the middle"},
		{"wrong type", with("duration_seconds", `"4"`), nil, 400, "invalid_field", "duration_seconds must be an integer"},
		{"fractional duration", with("duration_seconds", `4.5`), nil, 400, "invalid_field", "duration_seconds"},
		{"model missing", with("model", ""), nil, 400, "invalid_field", "model is required"},
		{"model not offered", with("model", `"acme/video-9"`), nil, 400, "invalid_field", "acme/video-1, acme/video-2"},
		{"prompt missing", with("prompt", ""), nil, 400, "invalid_field", "prompt is required"},
		{"prompt blank", with("prompt", `"  \n\t "`), nil, 400, "invalid_field", "prompt is required"},
		{"prompt too long in characters", with("prompt", `"`+strings.Repeat("é", maxPromptChars+1)+`"`), nil, 400, "invalid_field", "101 characters long; the limit is 100"},
		{"prompt with NUL", with("prompt", `"a\u0000b"`), nil, 400, "invalid_field", "NUL"},
		{"duration missing", with("duration_seconds", ""), nil, 400, "invalid_field", "duration_seconds is required"},
		{"duration too short", with("duration_seconds", "-1"), nil, 400, "invalid_field", "from 1 to 20, got -1"},
		{"duration too long", with("duration_seconds", "21"), nil, 400, "invalid_field", "from 1 to 20, got 21"},
		{"resolution missing", with("resolution", ""), nil, 400, "invalid_field", "resolution is required"},
		{"resolution not offered", with("resolution", `"1280x721"`), nil, 400, "invalid_field", "1920x1080"},
		{"priority too low", with("priority", "-1"), nil, 400, "invalid_field", "priority must be from 0 to 10"},
		{"priority too high", with("priority", "11"), nil, 400, "invalid_field", "priority must be from 0 to 10"},
		{"input assets not strings", with("input_asset_ids", `[1]`), nil, 400, "invalid_field", "input_asset_ids must be an array of strings"},
		{"input asset not a uuid", with("input_asset_ids", `["nope"]`), nil, 400, "invalid_field", "input_asset_ids[0]"},
		{"input asset twice", with("input_asset_ids", `["0190c0de-0000-7000-8000-000000000000","0190c0de-0000-7000-8000-000000000000"]`), nil, 400, "invalid_field", "twice"},
		{"too many input assets", with("input_asset_ids", `[`+strings.TrimSuffix(strings.Repeat(`"0190c0de-0000-7000-8000-000000000000",`, 9), ",")+`]`), nil, 400, "invalid_field", "limit is 8"},
		{"idempotency key missing", validBody, []string{"Content-Type", "application/json"}, 400, "invalid_idempotency_key", "required"},
		{"idempotency key too long", validBody, []string{"Idempotency-Key", strings.Repeat("k", 201)}, 400, "invalid_idempotency_key", "limit is 200"},
		{"idempotency key not ASCII", validBody, []string{"Idempotency-Key", "clé"}, 400, "invalid_idempotency_key", "printable"},
		{"two idempotency keys", validBody, []string{"Idempotency-Key", "a", "Idempotency-Key", "b"}, 400, "invalid_idempotency_key", "exactly one"},
		{"not JSON", validBody, []string{"Idempotency-Key", "k", "Content-Type", "text/plain"}, 415, "unsupported_media_type", "application/json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			headers := tt.headers
			if headers == nil {
				headers = []string{"Idempotency-Key", "limits-" + tt.name, "Content-Type", "application/json"}
			}
			r := b.do(t, http.MethodPost, "/v1/generations", key, tt.body, headers...)
			require.Equal(t, tt.status, r.status, "body: %s", r.body)
			require.Equal(t, tt.code, r.errorCode(t))
			require.Contains(t, r.message(t), tt.contains)
		})
	}
	require.Equal(t, 0, b.count(t, `SELECT count(*) FROM generation_tasks WHERE tenant_id = $1`, tenantID))

	t.Run("limits are inclusive", func(t *testing.T) {
		body := `{"model":"acme/video-2","prompt":"` + strings.Repeat("é", maxPromptChars) + `","duration_seconds":20,"resolution":"1920x1080","priority":10}`
		r := b.do(t, http.MethodPost, "/v1/generations", key, body, "Idempotency-Key", strings.Repeat("k", 200))
		require.Equal(t, http.StatusAccepted, r.status, "body: %s", r.body)
	})
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, header := range map[string]string{
		"missing":     "",
		"unknown key": "Bearer avk_unknown",
		"not bearer":  "Basic dXNlcjpwYXNz",
		"empty key":   "Bearer ",
	} {
		t.Run(name, func(t *testing.T) {
			var headers []string
			if header != "" {
				headers = []string{"Authorization", header}
			}
			r := b.do(t, http.MethodGet, "/v1/generations/0190c0de-0000-7000-8000-000000000000", "", "", headers...)
			require.Equal(t, http.StatusUnauthorized, r.status)
			require.Equal(t, "unauthenticated", r.errorCode(t))
			require.NotEmpty(t, r.header.Get("WWW-Authenticate"))
		})
	}
}

func TestUnknownRoutesAnswerJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, http.MethodGet, "/v1/nothing-here", "", "")
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", r.errorCode(t))

	r = b.do(t, http.MethodDelete, "/v1/generations", "", "")
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	require.Equal(t, "method_not_allowed", r.errorCode(t))
	require.Equal(t, "POST", r.header.Get("Allow"))
}
