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
