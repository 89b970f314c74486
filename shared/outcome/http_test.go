package outcome_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/outcome"
)

// answer is what WriteHTTP sends for status and err, read back by FromHTTP.
func answer(t *testing.T, status int, err error) error {
	t.Helper()
	rec := httptest.NewRecorder()
	outcome.WriteHTTP(rec, status, err)
	resp := rec.Result()
	body, rerr := io.ReadAll(resp.Body)
	require.NoError(t, rerr)
	require.Equal(t, status, resp.StatusCode)
	return outcome.FromHTTP(resp.StatusCode, resp.Header.Get("Content-Type"), body)
}

func TestFailureBodyKeepsClassAndCode(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		err       error
		wantClass outcome.Class
		wantCode  string
		wantMsg   string
	}{
		{"permanent keeps its code", 422, outcome.Permanentf("security.tenant_mismatch", "not yours"), outcome.ClassPermanent, "security.tenant_mismatch", "not yours"},
		{"retryable keeps its code", 500, outcome.Retryable("provider.unavailable", fmt.Errorf("down")), outcome.ClassRetryable, "provider.unavailable", "down"},
		{"unmarked 4xx is named by its status", 400, fmt.Errorf("bad"), outcome.ClassPermanent, "http.400", "bad"},
		{"unmarked 5xx is named by its status", 503, context.DeadlineExceeded, outcome.ClassRetryable, "http.503", context.DeadlineExceeded.Error()},
		{"the status decides the class", 500, outcome.Permanentf("payload.invalid", "odd"), outcome.ClassRetryable, "payload.invalid", "odd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := answer(t, tt.status, tt.err)
			class, code := outcome.Of(err)
			require.Equal(t, tt.wantClass, class)
			require.Equal(t, tt.wantCode, code)
			require.Equal(t, tt.wantMsg, err.Error())
		})
	}
}

func TestFromHTTPWithoutBody(t *testing.T) {
	t.Parallel()
	require.NoError(t, outcome.FromHTTP(http.StatusOK, "", nil))
	require.NoError(t, outcome.FromHTTP(http.StatusAccepted, outcome.ContentType, []byte("{}")))

	err := outcome.FromHTTP(http.StatusUnprocessableEntity, "text/plain", []byte("no"))
	class, code := outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "http.422", code)

	// A proxy's HTML error page, or JSON that is not a failure body.
	_, code = outcome.Of(outcome.FromHTTP(http.StatusBadGateway, "text/html", []byte("<html>")))
	require.Equal(t, "http.502", code)
	_, code = outcome.Of(outcome.FromHTTP(http.StatusNotFound, "application/json", []byte(`{"message":"no route"}`)))
	require.Equal(t, "http.404", code)
	_, code = outcome.Of(outcome.FromHTTP(http.StatusNotFound, "application/json; charset=utf-8", []byte(`not json`)))
	require.Equal(t, "http.404", code)
}

// TestFromResultMatchesFromHTTP: a handler's answer classifies the same in
// process as over HTTP.
func TestFromResultMatchesFromHTTP(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		cehttp.NewResult(http.StatusUnprocessableEntity, "%w", outcome.Permanentf("security.tenant_mismatch", "event names tenant %s", "t2")),
		cehttp.NewResult(http.StatusBadRequest, "%w", outcome.Permanentf("envelope.bad_id", "id")),
		cehttp.NewResult(http.StatusInternalServerError, "%w", outcome.Retryable("db.unavailable", nil)),
		cehttp.NewResult(http.StatusUnprocessableEntity, "no"),
		outcome.Permanentf("payload.invalid", "bare permanent"),
		context.Canceled,
	} {
		status, cause := outcome.ResultOf(err)
		overHTTP := answer(t, status, cause)
		inProcess := outcome.FromResult(err)
		c1, k1 := outcome.Of(overHTTP)
		c2, k2 := outcome.Of(inProcess)
		require.Equal(t, [3]string{string(c1), k1, overHTTP.Error()}, [3]string{string(c2), k2, inProcess.Error()}, "%v", err)
	}
	require.NoError(t, outcome.FromResult(nil))
	require.NoError(t, outcome.FromResult(cehttp.NewResult(http.StatusOK, "ok")))
}

// TestRetryAfterCrossesHTTP: the wait a retryable failure asks for reaches
// the adapter over HTTP and in process alike; a permanent answer asks for
// none, and neither does a 4xx carrying one.
func TestRetryAfterCrossesHTTP(t *testing.T) {
	t.Parallel()
	held := outcome.RetryAfter("render.chunk_held", fmt.Errorf("held"), 1500*time.Millisecond)
	for name, err := range map[string]error{"http": answer(t, 500, held), "in process": outcome.FromResult(held)} {
		d, ok := outcome.RetryAfterOf(err)
		require.True(t, ok, name)
		require.Equal(t, 1500*time.Millisecond, d, name)
		_, code := outcome.Of(err)
		require.Equal(t, "render.chunk_held", code, name)
	}
	_, ok := outcome.RetryAfterOf(answer(t, 422, held))
	require.False(t, ok, "a 4xx is permanent: no retry at all")
	_, ok = outcome.RetryAfterOf(answer(t, 500, outcome.Retryable("x", nil)))
	require.False(t, ok, "no wait asked for: the adapter's backoff")
}
