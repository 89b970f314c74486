package telemetry_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/telemetry"
)

func TestServer(t *testing.T) {
	t.Parallel()
	reg := telemetry.NewRegistry()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "aivedio_test_total", Help: "test"})
	reg.MustRegister(counter)
	counter.Add(3)
	var broken atomic.Bool
	s, err := telemetry.Listen("127.0.0.1:0", reg, func(context.Context) error {
		if broken.Load() {
			return errors.New("database unreachable")
		}
		return nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + s.Addr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	status, _ := get("/healthz")
	require.Equal(t, http.StatusOK, status)
	status, _ = get("/readyz")
	require.Equal(t, http.StatusOK, status)
	broken.Store(true)
	status, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, "database unreachable")
	status, body = get("/metrics")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "aivedio_test_total 3")
	require.Contains(t, body, "go_goroutines")

	_, err = telemetry.Listen(s.Addr(), reg, nil)
	require.ErrorContains(t, err, "listen on "+s.Addr())
}

// A collector declared by two lists (the API's and the stages', both
// served by local) is registered once; two collectors of one series are
// still a programmer's error.
func TestNewRegistryRegistersACollectorOnce(t *testing.T) {
	t.Parallel()
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "aivedio_test_total", Help: "test"})
	counter.Inc()
	reg := telemetry.NewRegistry(counter, counter)
	families, err := reg.Gather()
	require.NoError(t, err)
	var n int
	for _, f := range families {
		if f.GetName() == "aivedio_test_total" {
			n += len(f.GetMetric())
		}
	}
	require.Equal(t, 1, n)

	twin := prometheus.NewCounter(prometheus.CounterOpts{Name: "aivedio_test_total", Help: "test"})
	require.Panics(t, func() { telemetry.NewRegistry(counter, twin) })
}
