package source_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	fcloudevents "knative.dev/func-go/cloudevents"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/delivery"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
)

// statusServer answers every request with status(n) for the n-th request.
func statusServer(t *testing.T, status func(n int) int) *httptest.Server {
	t.Helper()
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status(int(n.Add(1))))
	}))
	t.Cleanup(s.Close)
	return s
}

// TestColdStartIsRetriedWithinTheDelivery: a function scaling from zero
// refuses connections, then answers 503 for a while. The delivery waits it
// out instead of burning the message's delivery attempts.
func TestColdStartIsRetriedWithinTheDelivery(t *testing.T) {
	t.Parallel()
	// Reserve a port, close it: connections are refused until the function starts.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())

	var handled atomic.Int32
	fn := stage.New(stage.Params{Name: "test", EventTypes: []string{"test.happened"},
		Work: func(context.Context, envelope.Envelope) error { handled.Add(1); return nil }})
	var requests atomic.Int32
	warming := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if requests.Add(1) <= 3 {
			w.WriteHeader(http.StatusServiceUnavailable) // the activator: not ready yet
			return
		}
		fcloudevents.New(fn).Handler.ServeHTTP(w, r)
	})
	go func() {
		time.Sleep(400 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return // the delivery below then fails and says so
		}
		server := &http.Server{Handler: warming}
		t.Cleanup(func() { _ = server.Close() })
		_ = server.Serve(l)
	}()

	d := delivery.NewHTTP("http://"+addr, 1, 10*time.Second)
	require.NoError(t, d.Deliver(context.Background(), validEvent(t)))
	require.Equal(t, int32(1), handled.Load())
	require.Greater(t, requests.Load(), int32(3))
}

func TestColdStartBudgetIsBounded(t *testing.T) {
	t.Parallel()
	server := statusServer(t, func(int) int { return http.StatusServiceUnavailable })
	start := time.Now()
	err := delivery.NewHTTP(server.URL, 1, 300*time.Millisecond).Deliver(context.Background(), validEvent(t))
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second, "gives the message back instead of waiting forever")
}

// TestHandlerFuncKeepsTheStageCode: in process, a stage's 422 keeps the
// reason code the stage gave, as it would in the quarantine row.
func TestHandlerFuncKeepsTheStageCode(t *testing.T) {
	t.Parallel()
	fn := stage.New(stage.Params{Name: "test", EventTypes: []string{"test.happened"},
		Work: func(context.Context, envelope.Envelope) error {
			return outcome.Permanentf("security.tenant_mismatch", "not yours")
		}})
	err := delivery.Func(fn.Handle).Deliver(context.Background(), validEvent(t))
	class, code := outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "security.tenant_mismatch", code)

	other := validEvent(t)
	other.SetType("other.type")
	_, code = outcome.Of(delivery.Func(fn.Handle).Deliver(context.Background(), other))
	require.Equal(t, "event.type_not_handled", code)
}
