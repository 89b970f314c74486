// Package telemetry gives every binary the same operational surface: a
// logger, a Prometheus registry, an HTTP server with /healthz (the process
// runs), /readyz (it can do its work) and /metrics, and OpenTelemetry
// tracing configured by the standard OTEL_* variables ([SetupTracing]).
//
// One generation, or one render, is one trace: the API request's span is
// stored with each event it writes (the outbox's trace_parent), the relay
// publishes in a child span and puts that span on the message as the
// CloudEvents traceparent and tracestate extensions, the source adapter
// receives and delivers in children of it, and the stage's span, a child
// of the delivery, is the parent of the inbox transaction, provider and S3
// calls, ffmpeg runs and the events the stage writes.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"reflect"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewLogger returns a JSON logger for deployments, or a text one when
// format is "text" (local runs).
func NewLogger(format string) *slog.Logger {
	if format == "text" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, nil))
}

// NewRegistry returns a registry with the Go runtime and process
// collectors, and cs: the collectors a binary declares for the code it
// runs (functions.StageCollectors, functions.APICollectors). The same
// collector given twice is registered once, so that a process running the
// code of two binaries (local runs the API and every stage) passes both
// lists; two different collectors of one series still panic, like
// [prometheus.Registry.MustRegister].
func NewRegistry(cs ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		err := reg.Register(c)
		var already prometheus.AlreadyRegisteredError
		if err == nil || errors.As(err, &already) && same(already.ExistingCollector, c) {
			continue
		}
		panic(fmt.Errorf("register collector: %w", err))
	}
	return reg
}

// same reports whether a and b are one collector; collectors of types
// that cannot be compared are never the same.
func same(a, b prometheus.Collector) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// ReadyFunc reports whether the process can do its work now; nil means ready.
type ReadyFunc func(ctx context.Context) error

// Server is the operational HTTP server.
type Server struct {
	srv      *http.Server
	listener net.Listener
}

// Listen opens addr and prepares the routes; Serve starts answering.
func Listen(addr string, reg *prometheus.Registry, ready ReadyFunc) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s for /healthz, /readyz and /metrics: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := ready(ctx); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, listener: l}, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.listener.Addr().String() }

// Serve answers until ctx ends, then shuts down within 5 s.
func (s *Server) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(s.listener) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
