package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"

	function "github.com/aivedio/pipeline"
)

// TestNoWriteTimeout: func-go's default would drop the answer of any
// delivery that takes longer than 30 s (render, transcode).
func TestNoWriteTimeout(t *testing.T) {
	t.Parallel()
	svc := newService(function.New())
	require.Zero(t, svc.WriteTimeout, "a long stage's answer must not be cut off by the server")
	require.NotZero(t, svc.ReadHeaderTimeout, "func-go's other timeouts stay")
}

// TestConcurrentEventsAnswerPromptly: many deliveries at once each get
// their own answer without waiting for another request. (func-go's handler
// leaves one request waiting for the next when two requests' events cross
// on its shared channel, which -race makes frequent.)
func TestConcurrentEventsAnswerPromptly(t *testing.T) {
	t.Parallel()
	// A plain server: httptest's Close would wait forever for a request
	// stuck the way func-go's handler leaves one.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: newService(function.New()).Handler, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	url := "http://" + l.Addr().String()

	// A request left waiting by func-go's handler never ends on its own
	// once the other callers are done: it is caught by its deadline, and
	// an answer takes milliseconds, so the deadline can be generous
	// enough for a machine loaded by -race.
	const callers, each, deadline = 8, 40, 5 * time.Second
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		slow []string
	)
	for c := range callers {
		wg.Go(func() {
			for i := range each {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				status, err := post(ctx, url, testEvent(fmt.Sprintf("%d-%d", c, i)))
				cancel()
				if err != nil || status != http.StatusServiceUnavailable {
					mu.Lock()
					slow = append(slow, fmt.Sprintf("caller %d event %d: status %d, err %v, after %s", c, i, status, err, time.Since(start)))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, slow, "every event is answered at once (the function is not started: 503)")
}

func TestHealth(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(newService(function.New()).Handler)
	t.Cleanup(server.Close)
	for path, want := range map[string]int{
		"/health/readiness": http.StatusServiceUnavailable, // no stage yet: Start has not run
		"/health/liveness":  http.StatusOK,
	} {
		resp, err := http.Get(server.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, path)
	}
}

func testEvent(id string) event.Event {
	ev := event.New()
	ev.SetID(id)
	ev.SetSource("/aivedio/test")
	ev.SetType("test.happened")
	return ev
}

// post sends ev in binary mode and returns the status.
func post(ctx context.Context, url string, ev event.Event) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, err
	}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req); err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestMetricsShareTheEventPort(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(newService(function.New()).Handler)
	t.Cleanup(server.Close)
	resp, err := http.Get(server.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "aivedio_inbox_outcomes_total")
	require.Contains(t, string(body), "go_goroutines")
}
