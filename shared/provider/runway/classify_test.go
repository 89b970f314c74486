package runway_test

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/runway"
)

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fixedClient answers every request with status, header and body, and
// records the last request.
func fixedClient(t *testing.T, status int, header http.Header, body string, last **http.Request) *runway.Client {
	t.Helper()
	c, err := runway.New(runway.Config{
		BaseURL:  "https://api.runway.test",
		APIToken: "key_test",
		NowFunc:  func() time.Time { return testNow },
		HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if last != nil {
				*last = r
			}
			h := http.Header{"Content-Type": {"application/json"}}
			for k, v := range header {
				h[k] = v
			}
			return &http.Response{StatusCode: status, Header: h, Request: r, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, nil
		})},
	})
	require.NoError(t, err)
	return c
}

func validRequest() provider.SubmitRequest {
	return provider.SubmitRequest{IdempotencyKey: "k1", ClientRequestID: "cr1", Model: "gen4.5", Prompt: "a calm lake at dawn", DurationSeconds: 5, Resolution: "1280x720"}
}

func requireClass(t *testing.T, err error, want provider.Class) *provider.Error {
	t.Helper()
	require.Error(t, err)
	var pe *provider.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, want, pe.Class, "error: %v", err)
	return pe
}

func TestSubmitClassifiesAnswers(t *testing.T) {
	cases := []struct {
		name       string
		status     int
		header     http.Header
		body       string
		want       provider.Class
		retryAfter time.Duration
		code       string
	}{
		{name: "daily limit", status: 429, header: http.Header{"Retry-After": {"7"}}, body: `{"error":"You have exceeded your daily generation limit"}`, want: provider.ClassRateLimited, retryAfter: 7 * time.Second},
		{name: "429 with a date", status: 429, header: http.Header{"Retry-After": {testNow.Add(time.Minute).Format(http.TimeFormat)}}, want: provider.ClassRateLimited, retryAfter: time.Minute},
		{name: "shedding load", status: 503, body: `{"error":"overloaded"}`, want: provider.ClassUnavailable},
		{name: "500 may have created", status: 500, want: provider.ClassTimeoutUnknown},
		{name: "502 may have created", status: 502, want: provider.ClassTimeoutUnknown},
		{name: "504 may have created", status: 504, want: provider.ClassTimeoutUnknown},
		{name: "moderation", status: 400, body: `{"error":"Your prompt was flagged","failureCode":"SAFETY.INPUT.TEXT"}`, want: provider.ClassContentRejected, code: "SAFETY.INPUT.TEXT"},
		{name: "preprocessing moderation", status: 400, body: `{"error":"flagged","code":"INPUT_PREPROCESSING.SAFETY.TEXT"}`, want: provider.ClassContentRejected, code: "INPUT_PREPROCESSING.SAFETY.TEXT"},
		{name: "other 400", status: 400, body: `{"error":"Invalid ratio"}`, want: provider.ClassRejected},
		{name: "400 with a code that is not moderation", status: 400, body: `{"error":"x","code":"SAFETYNET"}`, want: provider.ClassRejected, code: "SAFETYNET"},
		{name: "bad key", status: 401, body: `{"error":"Invalid API key"}`, want: provider.ClassRejected},
		{name: "404 at create is not a task", status: 404, want: provider.ClassRejected},
		{name: "redirect", status: 302, want: provider.ClassMalformed},
		{name: "2xx without id", status: 200, body: `{}`, want: provider.ClassMalformed},
		{name: "2xx not json", status: 200, body: `<html>`, want: provider.ClassMalformed},
		{name: "id that changes paths", status: 200, body: `{"id":"../x"}`, want: provider.ClassMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fixedClient(t, tc.status, tc.header, tc.body, nil).Submit(t.Context(), validRequest())
			pe := requireClass(t, err, tc.want)
			require.Equal(t, tc.retryAfter, pe.RetryAfter)
			require.Equal(t, tc.code, pe.Code)
			require.NotContains(t, err.Error(), validRequest().Prompt)
		})
	}
}

func TestSubmitSendsRunwayBody(t *testing.T) {
	var last *http.Request
	c := fixedClient(t, 200, nil, `{"id":"0f0e8a9c-1111-4222-8333-444455556666"}`, &last)
	req := validRequest()
	req.CallbackURL = "https://pipeline.test/v1/provider-callbacks/runway"
	job, err := c.Submit(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, provider.Job{ID: "0f0e8a9c-1111-4222-8333-444455556666", ClientRequestID: "cr1", Status: provider.StatusQueued, CreatedAt: testNow}, job)

	require.Equal(t, "/v1/text_to_video", last.URL.Path)
	require.Equal(t, "Bearer key_test", last.Header.Get("Authorization"))
	require.Equal(t, runway.DefaultAPIVersion, last.Header.Get(runway.VersionHeader))
	require.Empty(t, last.Header.Get("Idempotency-Key"), "Runway honours no key; sending one would suggest it does")
	body, err := io.ReadAll(last.Body)
	require.NoError(t, err)
	require.JSONEq(t, `{"model":"gen4.5","promptText":"a calm lake at dawn","ratio":"1280:720","duration":5}`, string(body))
}

func TestGetClassifiesAnswers(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		want   provider.Class
	}{
		{name: "gone task", status: 404, body: `{"error":"Task not found"}`, want: provider.ClassNotFound},
		{name: "500 on a read is only unavailable", status: 500, want: provider.ClassUnavailable},
		{name: "502", status: 502, want: provider.ClassUnavailable},
		{name: "429", status: 429, want: provider.ClassRateLimited},
		{name: "unknown status", status: 200, body: `{"id":"t1","status":"DONE","createdAt":"2026-11-30T11:00:00Z"}`, want: provider.ClassMalformed},
		{name: "no createdAt", status: 200, body: `{"id":"t1","status":"PENDING"}`, want: provider.ClassMalformed},
		{name: "succeeded without output", status: 200, body: `{"id":"t1","status":"SUCCEEDED","createdAt":"2026-11-30T11:00:00Z","output":[]}`, want: provider.ClassMalformed},
		{name: "output not a URL", status: 200, body: `{"id":"t1","status":"SUCCEEDED","createdAt":"2026-11-30T11:00:00Z","output":["ftp://x/y"]}`, want: provider.ClassMalformed},
		{name: "not json", status: 200, body: `nope`, want: provider.ClassMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fixedClient(t, tc.status, nil, tc.body, nil).Get(t.Context(), "t1")
			requireClass(t, err, tc.want)
		})
	}
}

func jwtURL(exp int64) string {
	payload := base64.RawURLEncoding.EncodeToString([]byte(`{"exp":` + strconv.FormatInt(exp, 10) + `}`))
	return "https://cdn.runway.test/out.mp4?_jwt=e30." + payload + ".sig"
}

func TestGetMapsTasks(t *testing.T) {
	exp := testNow.Add(36 * time.Hour).Unix()
	created, _ := time.Parse(time.RFC3339, "2026-11-30T11:00:00Z")
	cases := []struct {
		name string
		body string
		want provider.Job
	}{
		{name: "pending", body: `{"id":"t1","status":"PENDING","createdAt":"2026-11-30T11:00:00Z"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusQueued, CreatedAt: created}},
		{name: "throttled", body: `{"id":"t1","status":"THROTTLED","createdAt":"2026-11-30T11:00:00Z"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusQueued, Throttled: true, CreatedAt: created}},
		{name: "running", body: `{"id":"t1","status":"RUNNING","createdAt":"2026-11-30T11:00:00Z","progress":0.42}`,
			want: provider.Job{ID: "t1", Status: provider.StatusRunning, Progress: 42, CreatedAt: created}},
		{name: "progress out of range is clamped", body: `{"id":"t1","status":"RUNNING","createdAt":"2026-11-30T11:00:00Z","progress":7}`,
			want: provider.Job{ID: "t1", Status: provider.StatusRunning, Progress: 100, CreatedAt: created}},
		{name: "succeeded, expiry from the signed URL", body: `{"id":"t1","status":"SUCCEEDED","createdAt":"2026-11-30T11:00:00Z","output":["` + jwtURL(exp) + `"]}`,
			want: provider.Job{ID: "t1", Status: provider.StatusSucceeded, Progress: 100, OutputURL: jwtURL(exp), OutputExpiresAt: time.Unix(exp, 0), CreatedAt: created}},
		{name: "succeeded, unsigned URL gets the documented lower bound", body: `{"id":"t1","status":"SUCCEEDED","createdAt":"2026-11-30T11:00:00Z","output":["https://cdn.runway.test/a.mp4","https://cdn.runway.test/b.mp4"]}`,
			want: provider.Job{ID: "t1", Status: provider.StatusSucceeded, Progress: 100, OutputURL: "https://cdn.runway.test/a.mp4", OutputExpiresAt: testNow.Add(runway.DefaultOutputRetention), CreatedAt: created}},
		{name: "failed for input moderation", body: `{"id":"t1","status":"FAILED","createdAt":"2026-11-30T11:00:00Z","failure":"Prompt rejected","failureCode":"SAFETY.INPUT.TEXT"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusFailed, ErrorCode: "SAFETY.INPUT.TEXT", ErrorMessage: "Prompt rejected", ContentRejected: true, CreatedAt: created}},
		{name: "failed for output moderation", body: `{"id":"t1","status":"FAILED","createdAt":"2026-11-30T11:00:00Z","failureCode":"SAFETY.OUTPUT.VIDEO"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusFailed, ErrorCode: "SAFETY.OUTPUT.VIDEO", ErrorMessage: "task failed", ContentRejected: true, CreatedAt: created}},
		{name: "failed in preprocessing moderation", body: `{"id":"t1","status":"FAILED","createdAt":"2026-11-30T11:00:00Z","failureCode":"INPUT_PREPROCESSING.SAFETY.TEXT"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusFailed, ErrorCode: "INPUT_PREPROCESSING.SAFETY.TEXT", ErrorMessage: "task failed", ContentRejected: true, CreatedAt: created}},
		{name: "failed internally is not moderation", body: `{"id":"t1","status":"FAILED","createdAt":"2026-11-30T11:00:00Z","failureCode":"INTERNAL.BAD_OUTPUT.CODE01"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusFailed, ErrorCode: "INTERNAL.BAD_OUTPUT.CODE01", ErrorMessage: "task failed", CreatedAt: created}},
		{name: "failed without a code", body: `{"id":"t1","status":"FAILED","createdAt":"2026-11-30T11:00:00Z","failure":"boom"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusFailed, ErrorCode: runway.ErrorCodeFailed, ErrorMessage: "boom", CreatedAt: created}},
		{name: "cancelled", body: `{"id":"t1","status":"CANCELLED","createdAt":"2026-11-30T11:00:00Z"}`,
			want: provider.Job{ID: "t1", Status: provider.StatusCanceled, CreatedAt: created}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job, err := fixedClient(t, 200, nil, tc.body, nil).Get(t.Context(), "t1")
			require.NoError(t, err)
			require.Equal(t, tc.want, job)
		})
	}
}

func TestTransportFailures(t *testing.T) {
	t.Run("refused before sending is unavailable", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		c, err := runway.New(runway.Config{BaseURL: "http://" + addr, Timeout: time.Second})
		require.NoError(t, err)
		_, err = c.Submit(t.Context(), validRequest())
		requireClass(t, err, provider.ClassUnavailable)
	})
	t.Run("reset after sending is timeout-unknown at create, unavailable on a read", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				_ = conn.Close()
			}
		}))
		defer srv.Close()
		c, err := runway.New(runway.Config{BaseURL: srv.URL, Timeout: time.Second, HTTPClient: srv.Client()})
		require.NoError(t, err)
		_, err = c.Submit(t.Context(), validRequest())
		requireClass(t, err, provider.ClassTimeoutUnknown)
		_, err = c.Get(t.Context(), "t1")
		requireClass(t, err, provider.ClassUnavailable)
	})
	t.Run("timeout after sending is timeout-unknown", func(t *testing.T) {
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		c, err := runway.New(runway.Config{BaseURL: srv.URL, Timeout: 100 * time.Millisecond, HTTPClient: srv.Client()})
		require.NoError(t, err)
		_, err = c.Submit(t.Context(), validRequest())
		requireClass(t, err, provider.ClassTimeoutUnknown)
	})
}

func TestSupports(t *testing.T) {
	c, err := runway.New(runway.Config{})
	require.NoError(t, err)
	var capable provider.Capable = c
	ok := []provider.SubmitRequest{
		validRequest(),
		{Model: "gen4.5", Prompt: "p", DurationSeconds: 10, Resolution: "720x1280"},
		{Model: "gen4.5", Prompt: "p"}, // model defaults
		{Model: "veo3.1", Prompt: "p", DurationSeconds: 6, Resolution: "1920x1080"},
		{Model: "veo3.1_fast", Prompt: "p", DurationSeconds: 4, Resolution: "1080x1920"},
		{Model: "veo3", Prompt: "p", DurationSeconds: 8, Resolution: "1280x720"},
	}
	for _, req := range ok {
		require.NoError(t, capable.Supports(req), "%+v", req)
	}
	refused := []struct {
		req     provider.SubmitRequest
		mention string
	}{
		{provider.SubmitRequest{Model: "gen4_turbo", Prompt: "p", DurationSeconds: 5, Resolution: "1280x720"}, "input image"},
		{provider.SubmitRequest{Model: "sora", Prompt: "p"}, `model "sora"`},
		{provider.SubmitRequest{Model: "gen4.5", Prompt: "p", DurationSeconds: 5, Resolution: "1920x1080"}, "ratio 1920:1080"},
		{provider.SubmitRequest{Model: "gen4.5", Prompt: "p", DurationSeconds: 12, Resolution: "1280x720"}, "duration 12s"},
		{provider.SubmitRequest{Model: "veo3", Prompt: "p", DurationSeconds: 4}, "duration 4s"},
		{provider.SubmitRequest{Model: "gen4.5", Prompt: "p", Resolution: "720p"}, `resolution "720p"`},
		{provider.SubmitRequest{Model: "gen4.5", Prompt: " "}, "prompt is empty"},
		{provider.SubmitRequest{Model: "gen4.5", Prompt: strings.Repeat("é", 1001)}, "1001 UTF-16"},
	}
	for _, tc := range refused {
		err := capable.Supports(tc.req)
		pe := requireClass(t, err, provider.ClassRejected)
		require.Equal(t, runway.CodeUnsupported, pe.Code)
		require.Contains(t, err.Error(), tc.mention)
	}
	// Both problems of one request are named, not just the first.
	err = c.Supports(provider.SubmitRequest{Model: "gen4.5", Prompt: "p", DurationSeconds: 1, Resolution: "960x960"})
	require.ErrorContains(t, err, "ratio 960:960")
	require.ErrorContains(t, err, "duration 1s")
}

func TestLookupAndCallbacksAreRefused(t *testing.T) {
	c, err := runway.New(runway.Config{})
	require.NoError(t, err)
	_, err = c.FindByClientRequestID(t.Context(), "cr1", testNow)
	pe := requireClass(t, err, provider.ClassRejected)
	require.Equal(t, runway.CodeLookupUnsupported, pe.Code)
	_, err = c.ParseCallback(http.Header{}, []byte(`{}`), testNow)
	requireClass(t, err, provider.ClassRejected)
	require.ErrorContains(t, err, "runway sends no callbacks")
}
