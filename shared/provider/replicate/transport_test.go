package replicate_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// action is what the raw server does with a request it has read whole.
type action int

const (
	answer  action = iota // 200/201 with a prediction, connection kept
	closeIt               // close the connection, answering nothing
	hang                  // answer nothing until the client leaves
	reset                 // close with RST
	short                 // 201 promising more body than it sends, then close
)

// rawServer speaks just enough HTTP/1.1 to misbehave after a request has
// arrived, which net/http's server will not do on purpose.
type rawServer struct {
	url     string
	submits atomic.Int32
}

func startRaw(t *testing.T, decide func(r *http.Request) action) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawServer{url: "http://" + ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			wg.Go(func() { s.serve(conn, decide) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

func (s *rawServer) serve(conn net.Conn, decide func(*http.Request) action) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		if req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/predictions") {
			s.submits.Add(1)
		}
		body := `{"id":"p1","status":"starting","created_at":"2026-11-30T11:58:00Z"}`
		switch decide(req) {
		case answer:
			fmt.Fprintf(conn, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			continue
		case closeIt:
		case hang:
			_, _ = io.Copy(io.Discard, br) // until the client closes
		case reset:
			_ = conn.(*net.TCPConn).SetLinger(0)
		case short:
			fmt.Fprintf(conn, "HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body)+100, body)
		}
		return
	}
}

func always(a action) func(*http.Request) action { return func(*http.Request) action { return a } }

// TestLostAnswers: a failure after a submit was written is
// timeout-unknown, the same failure on any other call unavailable, and a
// failure before anything was written unavailable for every call.
func TestLostAnswers(t *testing.T) {
	t.Parallel()
	calls := []struct {
		name   string
		submit bool
		call   func(ctx context.Context, c *replicate.Client) error
	}{
		{name: "submit", submit: true, call: func(ctx context.Context, c *replicate.Client) error {
			_, err := c.Submit(ctx, provider.SubmitRequest{IdempotencyKey: "k", ClientRequestID: "r", Model: "acme/m", Prompt: "p"})
			return err
		}},
		{name: "get", call: func(ctx context.Context, c *replicate.Client) error { _, err := c.Get(ctx, "p1"); return err }},
		{name: "cancel", call: func(ctx context.Context, c *replicate.Client) error { _, err := c.Cancel(ctx, "p1"); return err }},
		{name: "find", call: func(ctx context.Context, c *replicate.Client) error {
			_, err := c.FindByClientRequestID(ctx, "r", time.Now())
			return err
		}},
	}
	failures := []struct {
		name    string
		action  action
		timeout time.Duration
	}{
		{name: "closed", action: closeIt},
		{name: "hung until the timeout", action: hang, timeout: 200 * time.Millisecond},
		{name: "reset", action: reset},
		{name: "body cut short", action: short},
	}
	for _, f := range failures {
		for _, call := range calls {
			t.Run(f.name+"/"+call.name, func(t *testing.T) {
				t.Parallel()
				srv := startRaw(t, always(f.action))
				c := newClient(t, func(c *replicate.Config) {
					c.BaseURL = srv.url
					if f.timeout > 0 {
						c.Timeout = f.timeout
					}
				})
				err := call.call(t.Context(), c)
				if call.submit {
					requireClass(t, provider.ClassTimeoutUnknown, err)
				} else {
					requireClass(t, provider.ClassUnavailable, err)
				}
				if f.action == hang {
					require.ErrorIs(t, err, context.DeadlineExceeded)
				}
			})
		}
	}

	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		c := newClient(t, func(c *replicate.Config) { c.BaseURL = "http://" + addr })
		for _, call := range calls {
			requireClass(t, provider.ClassUnavailable, call.call(t.Context(), c))
		}
	})

	t.Run("canceled before sending", func(t *testing.T) {
		t.Parallel()
		srv := startRaw(t, always(answer))
		c := newClient(t, func(c *replicate.Config) { c.BaseURL = srv.url })
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		for _, call := range calls {
			err := call.call(ctx, c)
			requireClass(t, provider.ClassUnavailable, err)
			require.ErrorIs(t, err, context.Canceled)
		}
		require.Zero(t, srv.submits.Load())
	})
}

// TestSubmitNeverReplayed: net/http replays a request with an
// Idempotency-Key when a reused connection fails; the client must not let
// it, because Replicate would start a second prediction.
func TestSubmitNeverReplayed(t *testing.T) {
	t.Parallel()
	var n atomic.Int32
	srv := startRaw(t, func(r *http.Request) action {
		if n.Add(1) == 1 {
			return answer // warm a keep-alive connection
		}
		return closeIt
	})
	c := newClient(t, func(c *replicate.Config) { c.BaseURL = srv.url })
	req := provider.SubmitRequest{IdempotencyKey: "k", ClientRequestID: "r", Model: "acme/m", Prompt: "p"}

	_, err := c.Submit(t.Context(), req)
	require.NoError(t, err)
	_, err = c.Submit(t.Context(), req)
	requireClass(t, provider.ClassTimeoutUnknown, err)
	require.Equal(t, int32(2), srv.submits.Load(), "the lost submit was sent again")
}

// roundTripFunc is a transport that reports no trace events, like many
// wrappers do.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestUntracedTransport: without trace events only a dial failure proves a
// submit was not sent.
func TestUntracedTransport(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		err  error
		want provider.Class
	}{
		{name: "dial", err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, want: provider.ClassUnavailable},
		{name: "dns", err: &net.DNSError{Err: "no such host", Name: "api.replicate.com"}, want: provider.ClassUnavailable},
		{name: "anything else", err: io.ErrUnexpectedEOF, want: provider.ClassTimeoutUnknown},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClient(t, func(c *replicate.Config) {
				c.HTTPClient = &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, tc.err })}
			})
			_, err := c.Submit(t.Context(), provider.SubmitRequest{IdempotencyKey: "k", Model: "acme/m", Prompt: "p"})
			requireClass(t, tc.want, err)
			_, err = c.Get(t.Context(), "p1")
			requireClass(t, provider.ClassUnavailable, err)
		})
	}
}
