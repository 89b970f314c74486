package replicate_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// testNow is the clock of the table tests, so HTTP dates and expiry times
// are exact.
var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// responseCase is one answer to GET /v1/predictions/{id} and what the
// client must make of it. The fuzz target starts from these.
type responseCase struct {
	name       string
	status     int
	retryAfter string // Retry-After header, when set
	body       string
	class      provider.Class // "" for success
	wantWait   time.Duration
	check      func(t *testing.T, j provider.Job)
}

const created = `"created_at":"2026-11-30T11:58:00.123456Z"`

var responseCases = []responseCase{
	{name: "starting", status: 200, body: `{"id":"p1","status":"starting",` + created + `,"output":null,"error":null,"logs":null}`,
		check: func(t *testing.T, j provider.Job) {
			require.Equal(t, provider.Job{ID: "p1", Status: provider.StatusQueued, CreatedAt: time.Date(2026, 11, 30, 11, 58, 0, 123456000, time.UTC)}, j)
		}},
	{name: "processing with progress logs", status: 200, body: `{"id":"p1","status":"processing",` + created + `,"logs":"loading\n 10%|█ | 10/100\r 42%|████ | 42/100"}`,
		check: func(t *testing.T, j provider.Job) {
			require.Equal(t, provider.StatusRunning, j.Status)
			require.Equal(t, 42, j.Progress)
		}},
	{name: "succeeded with a URL", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"completed_at":"2026-11-30T11:59:00Z","output":"https://replicate.delivery/xezq/abc/out.mp4","data_removed":false}`,
		check: func(t *testing.T, j provider.Job) {
			require.Equal(t, provider.StatusSucceeded, j.Status)
			require.Equal(t, 100, j.Progress)
			require.Equal(t, "https://replicate.delivery/xezq/abc/out.mp4", j.OutputURL)
			require.Equal(t, time.Date(2026, 11, 30, 12, 59, 0, 0, time.UTC), j.OutputExpiresAt)
		}},
	{name: "succeeded with a list", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"output":["https://replicate.delivery/a.mp4","https://replicate.delivery/b.mp4"]}`,
		check: func(t *testing.T, j provider.Job) { require.Equal(t, "https://replicate.delivery/a.mp4", j.OutputURL) }},
	{name: "succeeded with a video object", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"output":{"video":"https://replicate.delivery/v.mp4","poster":"x"}}`,
		check: func(t *testing.T, j provider.Job) { require.Equal(t, "https://replicate.delivery/v.mp4", j.OutputURL) }},
	{name: "succeeded after data removal", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"completed_at":"2026-11-30T11:59:00Z","output":null,"data_removed":true}`,
		check: func(t *testing.T, j provider.Job) {
			require.Empty(t, j.OutputURL)
			require.Equal(t, time.Date(2026, 11, 30, 11, 59, 0, 0, time.UTC), j.OutputExpiresAt)
		}},
	{name: "failed", status: 200, body: `{"id":"p1","status":"failed",` + created + `,"error":"CUDA out of memory"}`,
		check: func(t *testing.T, j provider.Job) {
			require.Equal(t, provider.StatusFailed, j.Status)
			require.Equal(t, replicate.ErrorCodeFailed, j.ErrorCode)
			require.Equal(t, "CUDA out of memory", j.ErrorMessage)
		}},
	{name: "failed as sensitive", status: 200, body: `{"id":"p1","status":"failed",` + created + `,"error":"The input or output was flagged as sensitive. Please try again with different inputs. (E005)"}`,
		check: func(t *testing.T, j provider.Job) {
			require.Equal(t, provider.StatusFailed, j.Status)
			require.True(t, j.ContentRejected)
			require.Equal(t, replicate.CodeSensitive, j.ErrorCode)
		}},
	{name: "failed with a code that only contains E005", status: 200, body: `{"id":"p1","status":"failed",` + created + `,"error":"E0051 worker lost; output mentions flagged as sensitive"}`,
		check: func(t *testing.T, j provider.Job) {
			require.False(t, j.ContentRejected, "the code decides, not the words")
			require.Equal(t, replicate.ErrorCodeFailed, j.ErrorCode)
		}},
	{name: "canceled", status: 200, body: `{"id":"p1","status":"canceled",` + created + `}`,
		check: func(t *testing.T, j provider.Job) { require.Equal(t, provider.StatusCanceled, j.Status) }},
	{name: "webhook carries the client request id", status: 200, body: `{"id":"p1","status":"starting",` + created + `,"webhook":"https://api.example/cb?aivedio_client_request_id=req-7"}`,
		check: func(t *testing.T, j provider.Job) { require.Equal(t, "req-7", j.ClientRequestID) }},

	{name: "429 with seconds", status: 429, retryAfter: "7", body: `{"detail":"Request was throttled."}`, class: provider.ClassRateLimited, wantWait: 7 * time.Second},
	{name: "429 with an HTTP date", status: 429, retryAfter: testNow.Add(30 * time.Second).Format(http.TimeFormat), class: provider.ClassRateLimited, wantWait: 30 * time.Second},
	{name: "429 with a date in the past", status: 429, retryAfter: testNow.Add(-time.Minute).Format(http.TimeFormat), class: provider.ClassRateLimited},
	{name: "429 with only Replicate's detail", status: 429, body: `{"detail":"Request was throttled. Your rate limit resets in ~12s."}`, class: provider.ClassRateLimited, wantWait: 12 * time.Second},
	{name: "429 with garbage Retry-After", status: 429, retryAfter: "soon", class: provider.ClassRateLimited},
	{name: "500", status: 500, body: `{"detail":"internal"}`, class: provider.ClassUnavailable},
	{name: "502 html", status: 502, body: `<html>bad gateway</html>`, class: provider.ClassUnavailable},
	{name: "503 with Retry-After", status: 503, retryAfter: "5", class: provider.ClassUnavailable, wantWait: 5 * time.Second},
	{name: "408", status: 408, class: provider.ClassUnavailable},
	{name: "404", status: 404, body: `{"detail":"Not found."}`, class: provider.ClassNotFound},
	{name: "401", status: 401, body: `{"title":"Unauthenticated","detail":"You did not pass a valid authentication token","status":401}`, class: provider.ClassRejected},
	{name: "402", status: 402, body: `{"detail":"You have insufficient credit"}`, class: provider.ClassRejected},
	{name: "422", status: 422, body: `{"detail":"Input validation failed"}`, class: provider.ClassRejected},
	{name: "redirect without Location", status: 302, class: provider.ClassMalformed},

	{name: "not JSON", status: 200, body: `<html>hello</html>`, class: provider.ClassMalformed},
	{name: "empty body", status: 200, body: ``, class: provider.ClassMalformed},
	{name: "empty object", status: 200, body: `{}`, class: provider.ClassMalformed},
	{name: "null", status: 200, body: `null`, class: provider.ClassMalformed},
	{name: "array", status: 200, body: `[]`, class: provider.ClassMalformed},
	{name: "truncated", status: 200, body: `{"id":"p1","status":"succ`, class: provider.ClassMalformed},
	{name: "id of the wrong type", status: 200, body: `{"id":5,"status":"starting",` + created + `}`, class: provider.ClassMalformed},
	{name: "unknown status", status: 200, body: `{"id":"p1","status":"exploded",` + created + `}`, class: provider.ClassMalformed},
	{name: "no created_at", status: 200, body: `{"id":"p1","status":"starting"}`, class: provider.ClassMalformed},
	{name: "succeeded without output", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"output":null}`, class: provider.ClassMalformed},
	{name: "succeeded with a number", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"output":42}`, class: provider.ClassMalformed},
	{name: "succeeded with a non-http URL", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"output":"file:///etc/passwd"}`, class: provider.ClassMalformed},
	{name: "succeeded with an object without video", status: 200, body: `{"id":"p1","status":"succeeded",` + created + `,"output":{"image":"https://x/y.png"}}`, class: provider.ClassMalformed},
	{name: "larger than 4 MiB", status: 200, body: `{"id":"p1","logs":"` + strings.Repeat("a", 4<<20) + `"}`, class: provider.ClassMalformed},
}

// TestClassify serves each case from a real HTTP server and checks what
// Get makes of it.
func TestClassify(t *testing.T) {
	t.Parallel()
	for _, tc := range responseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, func(c *replicate.Config) {
				c.BaseURL = srv.URL
				c.NowFunc = func() time.Time { return testNow }
			})

			job, err := c.Get(t.Context(), "p1")
			if tc.class == "" {
				require.NoError(t, err)
				tc.check(t, job)
				return
			}
			requireClass(t, tc.class, err)
			require.Equal(t, tc.wantWait, provider.RetryAfterOf(err))
			var pe *provider.Error
			require.True(t, errors.As(err, &pe))
			if tc.status != 200 {
				require.Equal(t, tc.status, pe.StatusCode)
			}
		})
	}
}

// TestSubmitAnswers covers what only Submit does with an answer: the
// request's client request id fills in for a provider that echoes none,
// and the prompt never reaches an error.
func TestSubmitAnswers(t *testing.T) {
	t.Parallel()
	const prompt = "a secret prompt about the launch of Project Nightjar"
	cases := []struct {
		name   string
		status int
		body   string
		class  provider.Class
	}{
		{name: "created", status: 201, body: `{"id":"p1","status":"starting",` + created + `}`},
		{name: "validation error quoting the prompt", status: 422, body: `{"detail":"input.prompt: '` + prompt + `' is too long"}`, class: provider.ClassRejected},
		{name: "created but unreadable", status: 201, body: `{"id":`, class: provider.ClassMalformed},
		{name: "refused as sensitive", status: 422, body: `{"detail":"E005: the input was flagged as sensitive: '` + prompt + `'"}`, class: provider.ClassContentRejected},
		{name: "sensitive code after a long detail", status: 400, body: `{"detail":"` + strings.Repeat("x", 300) + ` (E005)"}`, class: provider.ClassContentRejected},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			seen := make(chan *http.Request, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Clone(context.Background())
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, func(c *replicate.Config) { c.BaseURL, c.APIToken = srv.URL, "r8_secret_token" })
			req := submitRequest(t, "")
			req.Prompt = prompt

			job, err := c.Submit(t.Context(), req)
			got := <-seen
			require.Equal(t, "/v1/models/acme/video-model/predictions", got.URL.Path)
			require.Equal(t, req.IdempotencyKey, got.Header.Get("Idempotency-Key"))
			require.Equal(t, "Bearer r8_secret_token", got.Header.Get("Authorization"))
			if tc.class == "" {
				require.NoError(t, err)
				require.Equal(t, req.ClientRequestID, job.ClientRequestID)
				return
			}
			requireClass(t, tc.class, err)
			require.NotContains(t, err.Error(), "Nightjar")
			require.NotContains(t, err.Error(), "r8_secret_token")
		})
	}
}

// TestSubmitRoutes checks the endpoint and body each model form gets.
func TestSubmitRoutes(t *testing.T) {
	t.Parallel()
	const version = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
	cases := []struct {
		model, path, version string
	}{
		{model: "acme/video-model", path: "/v1/models/acme/video-model/predictions"},
		{model: "acme/video-model:" + version, path: "/v1/predictions", version: version},
		{model: version, path: "/v1/predictions", version: version},
	}
	for _, tc := range cases {
		t.Run(tc.model, func(t *testing.T) {
			t.Parallel()
			type seenReq struct {
				path string
				body map[string]any
			}
			seen := make(chan seenReq, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body map[string]any
				_ = json.NewDecoder(r.Body).Decode(&body)
				seen <- seenReq{path: r.URL.Path, body: body}
				w.WriteHeader(201)
				_, _ = w.Write([]byte(`{"id":"p1","status":"starting",` + created + `}`))
			}))
			t.Cleanup(srv.Close)
			c := newClient(t, func(c *replicate.Config) { c.BaseURL = srv.URL })
			req := submitRequest(t, "https://api.example/v1/provider-callbacks/replicate?tenant=t1")
			req.Model = tc.model

			_, err := c.Submit(t.Context(), req)
			require.NoError(t, err)
			got := <-seen
			path, body := got.path, got.body
			require.Equal(t, tc.path, path)
			if tc.version != "" {
				require.Equal(t, tc.version, body["version"])
			} else {
				require.NotContains(t, body, "version")
			}
			require.Equal(t, map[string]any{"prompt": req.Prompt, "duration": float64(2), "resolution": "1280x720"}, body["input"])
			marked := url.Values{replicate.ClientRequestIDParam: {req.ClientRequestID}, "tenant": {"t1"}}
			require.Equal(t, "https://api.example/v1/provider-callbacks/replicate?"+marked.Encode(), body["webhook"])
			require.Equal(t, []any{"completed"}, body["webhook_events_filter"])
		})
	}

	t.Run("refused before sending", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, func(c *replicate.Config) { c.BaseURL = "http://127.0.0.1:1" })
		for _, edit := range []func(*provider.SubmitRequest){
			func(r *provider.SubmitRequest) { r.Model = "no-slash" },
			func(r *provider.SubmitRequest) { r.Model = "a/b/c" },
			func(r *provider.SubmitRequest) { r.Model = "acme/m:notaversion" },
			func(r *provider.SubmitRequest) { r.IdempotencyKey = "" },
			func(r *provider.SubmitRequest) { r.CallbackURL = "not a url" },
		} {
			req := submitRequest(t, "")
			edit(&req)
			_, err := c.Submit(t.Context(), req)
			requireClass(t, provider.ClassRejected, err)
		}
	})
}
