package replicate_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// TestMain fails the run when goroutines outlive the tests: the simulator,
// its webhook workers and every HTTP connection must be gone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const simToken = "sim-token"

// testBundle is a simulator, a client pointed at it and, when asked for, a
// callback receiver.
type testBundle struct {
	sim       *providersim.Server
	simOpts   providersim.Options
	baseURL   string
	client    *replicate.Client
	callbacks chan callback
	// callbackURL is empty unless setup was given withCallbacks.
	callbackURL string
}

// callback is what the receiver got and what ParseCallback made of it.
type callback struct {
	header http.Header
	body   []byte
	job    provider.Job
	err    error
}

type setupOpts struct {
	sim       func(*providersim.Options)
	client    func(*replicate.Config)
	callbacks bool
	// callbackStatus answers the first callbacks; later ones get 204.
	callbackStatus []int
}

func setup(t *testing.T, so setupOpts) *testBundle {
	t.Helper()
	o := providersim.DefaultOptions()
	o.APIToken = simToken
	o.JobDurationMin, o.JobDurationMax = 50*time.Millisecond, 100*time.Millisecond
	o.WebhookBackoff = 20 * time.Millisecond
	if so.sim != nil {
		so.sim(&o)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	sim, err := providersim.New(o, logger)
	require.NoError(t, err)
	base, err := sim.Start(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })

	b := &testBundle{sim: sim, simOpts: o, baseURL: base}
	b.client = newClient(t, func(c *replicate.Config) {
		c.BaseURL, c.APIToken, c.WebhookSecret = base, simToken, sim.WebhookSecret()
		c.OutputRetention = o.OutputTTL
		c.Logger = logger
		if so.client != nil {
			so.client(c)
		}
	})
	if so.callbacks {
		b.callbacks = make(chan callback, 16)
		statuses := append([]int(nil), so.callbackStatus...)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			job, err := b.client.ParseCallback(r.Header, body, time.Now())
			b.callbacks <- callback{header: r.Header.Clone(), body: body, job: job, err: err}
			status := http.StatusNoContent
			if len(statuses) > 0 {
				status, statuses = statuses[0], statuses[1:]
			}
			w.WriteHeader(status)
		}))
		t.Cleanup(srv.Close)
		b.callbackURL = srv.URL + "/v1/provider-callbacks/replicate"
	}
	return b
}

// newClient makes a client with a transport of its own, closed when the
// test ends.
func newClient(t *testing.T, edit func(*replicate.Config)) *replicate.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	cfg := replicate.Config{HTTPClient: &http.Client{Transport: tr}, Timeout: 5 * time.Second, Outputs: provider.OutputGuard{AllowPrivate: true}}
	if edit != nil {
		edit(&cfg)
	}
	c, err := replicate.New(cfg)
	require.NoError(t, err)
	return c
}

// submitRequest is a request with keys unique to the test.
func submitRequest(t *testing.T, callbackURL string) provider.SubmitRequest {
	return provider.SubmitRequest{
		IdempotencyKey:  "idem-" + t.Name(),
		ClientRequestID: "crid-" + t.Name(),
		Model:           "acme/video-model",
		Prompt:          "a red fox running through fresh snow",
		DurationSeconds: 2,
		Resolution:      "1280x720",
		CallbackURL:     callbackURL,
	}
}

// waitTerminal polls Get until the job ends.
func (b *testBundle) waitTerminal(t *testing.T, id string) provider.Job {
	t.Helper()
	var job provider.Job
	require.Eventually(t, func() bool {
		var err error
		job, err = b.client.Get(t.Context(), id)
		require.NoError(t, err)
		return job.Status.Terminal()
	}, 10*time.Second, 10*time.Millisecond)
	return job
}

// stats reads GET /sim/stats over HTTP, the way an outside test would.
func (b *testBundle) stats(t *testing.T) providersim.Stats {
	t.Helper()
	var st providersim.Stats
	getJSON(t, b.baseURL+"/sim/stats", &st)
	return st
}

func requireClass(t *testing.T, want provider.Class, err error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want, provider.ClassOf(err), "error: %v", err)
}

// download reads a job's whole output.
func download(ctx context.Context, c *replicate.Client, job provider.Job) ([]byte, provider.Output, error) {
	out, err := c.Download(ctx, job)
	if err != nil {
		return nil, out, err
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	_, err = io.Copy(&buf, out.Body)
	return buf.Bytes(), out, err
}

// getJSON decodes a GET answer, on a connection that is not kept.
func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(v))
}
