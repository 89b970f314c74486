package runway_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/runway"
)

var knownClasses = map[provider.Class]bool{
	provider.ClassRateLimited: true, provider.ClassUnavailable: true, provider.ClassRejected: true,
	provider.ClassContentRejected: true, provider.ClassTimeoutUnknown: true, provider.ClassNotFound: true,
	provider.ClassOutputNotReady: true, provider.ClassOutputExpired: true, provider.ClassMalformed: true,
}

// FuzzTaskAnswer feeds any status, Retry-After and body to every call that
// reads an answer: the client never panics, fails only with a classified
// *provider.Error, and whatever it accepts is a usable job.
func FuzzTaskAnswer(f *testing.F) {
	for _, body := range []string{
		`{"id":"t1","status":"PENDING","createdAt":"2026-11-30T11:00:00Z"}`,
		`{"id":"t1","status":"THROTTLED","createdAt":"2026-11-30T11:00:00Z"}`,
		`{"id":"t1","status":"RUNNING","createdAt":"2026-11-30T11:00:00Z","progress":0.5}`,
		`{"id":"t1","status":"SUCCEEDED","createdAt":"2026-11-30T11:00:00Z","output":["https://cdn.runway.test/o.mp4?_jwt=a.eyJleHAiOjE3OTk5OTk5OTl9.c"]}`,
		`{"id":"t1","status":"FAILED","createdAt":"2026-11-30T11:00:00Z","failure":"x","failureCode":"SAFETY.OUTPUT.VIDEO"}`,
		`{"id":"t1","status":"CANCELLED","createdAt":"2026-11-30T11:00:00Z"}`,
		`{"id":"t1"}`,
		`{"error":"flagged","failureCode":"SAFETY.INPUT.TEXT"}`,
		`[]`, ``,
	} {
		f.Add(200, "", []byte(body))
		f.Add(400, "", []byte(body))
	}
	f.Add(429, "3", []byte(`{"error":"limit"}`))
	f.Add(503, "Wed, 30 Nov 2026 12:01:00 GMT", []byte(``))

	f.Fuzz(func(t *testing.T, status int, retryAfter string, body []byte) {
		if status < 100 || status > 599 {
			status = 200
		}
		header := http.Header{"Content-Type": {"application/json"}}
		if retryAfter != "" {
			header["Retry-After"] = []string{retryAfter}
		}
		c, err := runway.New(runway.Config{
			BaseURL: "https://api.runway.test",
			NowFunc: func() time.Time { return testNow },
			HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: status, Header: header.Clone(), Request: r,
					Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}, nil
			})},
		})
		require.NoError(t, err)
		check := func(job provider.Job, err error) {
			if err != nil {
				var pe *provider.Error
				require.True(t, errors.As(err, &pe), "unclassified error %T: %v", err, err)
				require.True(t, knownClasses[pe.Class], "unknown class %q", pe.Class)
				require.GreaterOrEqual(t, pe.RetryAfter, time.Duration(0))
				require.LessOrEqual(t, pe.RetryAfter, provider.MaxRetryAfter)
				return
			}
			require.NotEmpty(t, job.ID)
			require.Contains(t, []provider.Status{provider.StatusQueued, provider.StatusRunning, provider.StatusSucceeded, provider.StatusFailed, provider.StatusCanceled}, job.Status)
			require.True(t, job.Progress >= 0 && job.Progress <= 100, "progress %d", job.Progress)
			require.False(t, job.Throttled && job.Status != provider.StatusQueued, "only a queued job is throttled")
			require.False(t, job.ContentRejected && job.Status != provider.StatusFailed, "only a failed job is content rejected")
			if job.Status == provider.StatusSucceeded {
				u, perr := url.Parse(job.OutputURL)
				require.NoError(t, perr)
				require.Contains(t, []string{"http", "https"}, u.Scheme)
				require.False(t, job.OutputExpiresAt.IsZero())
			}
			if job.Status == provider.StatusFailed {
				require.NotEmpty(t, job.ErrorCode)
			}
		}
		check(c.Get(t.Context(), "t1"))
		check(c.Submit(t.Context(), validRequest()))
		check(c.Cancel(t.Context(), "t1"))
	})
}
