package providersim_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aivedio/pipeline/local/providersim"
)

// TestMain fails the run when goroutines outlive the tests: Close must end
// the server, the scheduler and the webhook workers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const token = "sim-token"

type testBundle struct {
	sim  *providersim.Server
	base string
}

func setup(t *testing.T, edit func(*providersim.Options)) *testBundle {
	t.Helper()
	o := providersim.DefaultOptions()
	o.APIToken = token
	o.JobDurationMin, o.JobDurationMax = 50*time.Millisecond, 50*time.Millisecond
	o.WebhookBackoff = 10 * time.Millisecond
	if edit != nil {
		edit(&o)
	}
	sim, err := providersim.New(o, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))
	require.NoError(t, err)
	base, err := sim.Start(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	return &testBundle{sim: sim, base: base}
}

// answer is an HTTP answer read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(a.body, &m), "body: %s", a.body)
	return m
}

// call makes one request on a connection that is not kept, with the
// simulator's token unless header says otherwise.
func (b *testBundle) call(t *testing.T, method, path string, body any, header map[string]string) answer {
	t.Helper()
	var r io.Reader
	if body != nil {
		buf, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(buf)
	}
	url := path
	if path[0] == '/' {
		url = b.base + path
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return answer{status: resp.StatusCode, header: resp.Header, body: got}
}

func (b *testBundle) create(t *testing.T, input map[string]any, header map[string]string) map[string]any {
	t.Helper()
	a := b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{"input": input}, header)
	require.Equal(t, http.StatusCreated, a.status, "body: %s", a.body)
	return a.json(t)
}

// waitStatus polls a prediction until it reaches status.
func (b *testBundle) waitStatus(t *testing.T, id, status string) map[string]any {
	t.Helper()
	var p map[string]any
	require.Eventually(t, func() bool {
		p = b.call(t, http.MethodGet, "/v1/predictions/"+id, nil, nil).json(t)
		return p["status"] == status
	}, 10*time.Second, 10*time.Millisecond)
	return p
}
