package replicate_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

var knownClasses = map[provider.Class]bool{
	provider.ClassRateLimited: true, provider.ClassUnavailable: true, provider.ClassRejected: true, provider.ClassContentRejected: true,
	provider.ClassTimeoutUnknown: true, provider.ClassNotFound: true, provider.ClassOutputNotReady: true,
	provider.ClassOutputExpired: true, provider.ClassMalformed: true,
}

// FuzzAnswer feeds any status, Retry-After and body to every call that
// parses an answer: the client never panics, fails only with a classified
// *provider.Error, and whatever it accepts is a usable job.
func FuzzAnswer(f *testing.F) {
	for _, tc := range responseCases {
		if len(tc.body) < 64<<10 { // the 4 MiB case would slow every mutation
			f.Add(tc.status, tc.retryAfter, []byte(tc.body))
		}
	}
	f.Add(200, "", []byte(`{"next":null,"previous":null,"results":[`+callbackBod+`]}`))
	f.Add(200, "", []byte(`{"next":"https://evil.example/v1/predictions?cursor=x","results":[]}`))
	f.Add(200, "", []byte(`{"next":"/v1/predictions?cursor=x","results":[{"id":"p2","status":"starting","created_at":"2026-11-30T11:59:00Z","source":"api"}]}`))
	f.Add(200, "", []byte(callbackBod))

	f.Fuzz(func(t *testing.T, status int, retryAfter string, body []byte) {
		if status < 100 || status > 599 {
			status = 200
		}
		header := http.Header{"Content-Type": {"application/json"}}
		if retryAfter != "" {
			header["Retry-After"] = []string{retryAfter}
		}
		c, err := replicate.New(replicate.Config{
			BaseURL:       "https://api.replicate.test",
			WebhookSecret: testSecret,
			MaxFindPages:  3,
			NowFunc:       func() time.Time { return testNow },
			HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return &http.Response{
					StatusCode: status, Header: header.Clone(), Request: r,
					Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)),
				}, nil
			})},
		})
		require.NoError(t, err)
		ctx := t.Context()

		job, err := c.Get(ctx, "p1")
		checkOutcome(t, job, err)
		job, err = c.Submit(ctx, provider.SubmitRequest{IdempotencyKey: "k", ClientRequestID: "req-1", Model: "acme/m", Prompt: "p", CallbackURL: "https://api.example/cb"})
		checkOutcome(t, job, err)
		job, err = c.Cancel(ctx, "p1")
		checkOutcome(t, job, err)
		job, err = c.FindByClientRequestID(ctx, "req-1", testNow.Add(-time.Hour))
		checkOutcome(t, job, err)

		ts := strconv.FormatInt(testNow.Unix(), 10)
		signed := http.Header{"Webhook-Id": {"msg_1"}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig(testKey, "msg_1", ts, string(body))}}
		job, err = c.ParseCallback(signed, body, testNow)
		checkOutcome(t, job, err)
	})
}

func checkOutcome(t *testing.T, job provider.Job, err error) {
	t.Helper()
	if err != nil {
		var pe *provider.Error
		require.True(t, errors.As(err, &pe), "unclassified error: %v", err)
		require.True(t, knownClasses[pe.Class], "unknown class %q", pe.Class)
		require.NotPanics(t, func() { _ = err.Error() })
		return
	}
	require.NotEmpty(t, job.ID)
	require.Contains(t, []provider.Status{provider.StatusQueued, provider.StatusRunning, provider.StatusSucceeded, provider.StatusFailed, provider.StatusCanceled}, job.Status)
	require.False(t, job.CreatedAt.IsZero())
	require.True(t, job.Progress >= 0 && job.Progress <= 100)
	if job.Status == provider.StatusSucceeded && job.OutputURL == "" {
		require.False(t, job.OutputExpiresAt.After(testNow), "a removed output cannot be live")
	}
}
