package reviewsim_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/reviewsim"
)

// frames serves one JPEG and one PNG.
func frames(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ok.jpg" {
			_, _ = w.Write([]byte{0xff, 0xd8, 0xff, 0xe0, 0, 0x10})
			return
		}
		_, _ = w.Write([]byte("\x89PNG"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func call(t *testing.T, url, secret, taskID, frame string) (*http.Response, map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"task_id": taskID, "tenant_id": "t", "asset_id": "a", "attempt": 1,
		"frames": []map[string]any{{"url": frame, "at_seconds": 0.5}}, "expires_at": time.Now().Add(time.Minute)})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req.Header.Set("X-Aivedio-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp, out
}

func TestSimulator(t *testing.T) {
	t.Parallel()
	o := reviewsim.DefaultOptions()
	o.RetryAfter = 7 * time.Second
	sim, err := reviewsim.New(o, nil)
	require.NoError(t, err)
	url, err := sim.Start(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	fr := frames(t)

	resp, out := call(t, url, sim.Secret(), "t1", fr.URL+"/ok.jpg")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "approve", out["decision"])

	resp, _ = call(t, url, "wrong", "t1", fr.URL+"/ok.jpg")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "an unsigned request is refused")

	resp, _ = call(t, url, sim.Secret(), "t1", fr.URL+"/not.png")
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode, "a frame that is no JPEG is refused")

	sim.Script("t2", reviewsim.Reject+":policy.x", reviewsim.Throttle, reviewsim.Err5xx, reviewsim.Malformed, reviewsim.Refuse)
	_, out = call(t, url, sim.Secret(), "t2", fr.URL+"/ok.jpg")
	require.Equal(t, "reject", out["decision"])
	require.Equal(t, "policy.x", out["reason_code"])
	resp, _ = call(t, url, sim.Secret(), "t2", fr.URL+"/ok.jpg")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	require.Equal(t, "7", resp.Header.Get("Retry-After"))
	resp, _ = call(t, url, sim.Secret(), "t2", fr.URL+"/ok.jpg")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, out = call(t, url, sim.Secret(), "t2", fr.URL+"/ok.jpg")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, out, "decision", "a malformed answer has no decision")
	resp, _ = call(t, url, sim.Secret(), "t2", fr.URL+"/ok.jpg")
	require.Nil(t, resp, "down: the connection closes unanswered")

	sim.SetDown(true)
	resp, _ = call(t, url, sim.Secret(), "t3", fr.URL+"/ok.jpg")
	require.Nil(t, resp)
	sim.SetDown(false)
	resp, _ = call(t, url, sim.Secret(), "t3", fr.URL+"/ok.jpg")
	require.Equal(t, http.StatusOK, resp.StatusCode)

	st := sim.Stats()
	require.Equal(t, reviewsim.Stats{Requests: 10, Approved: 2, Rejected: 1, Errors5xx: 1, Throttled: 1, Malformed: 1, Refused: 2,
		BadSignature: 1, FramesFetched: 6, FrameFailures: 1, Tasks: map[string]int{"t1": 2, "t2": 4, "t3": 1},
		Decisions: map[string][]string{"t1": {reviewsim.Approve}, "t2": {reviewsim.Reject}, "t3": {reviewsim.Approve}}}, st)
}
