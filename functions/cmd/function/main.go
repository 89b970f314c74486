// Command function serves the module's root function ([function.New]) with
// func-go's CloudEvents runtime: the binary of the stage image, in which the
// STAGE variable picks the stage. func-go listens on LISTEN_ADDRESS
// ([::]:8080 in the image), runs the function's Start, serves
// /health/readiness and /health/liveness, and on SIGTERM lets requests in
// flight finish for up to 30 s before it calls Stop.
//
// Two things differ from what `func build` scaffolds, both in [newService]:
// the server has no write timeout, and each event reaches the function on
// its own request's goroutine ([stage.HTTPHandler]).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	fcloudevents "knative.dev/func-go/cloudevents"

	function "github.com/aivedio/pipeline"
	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/telemetry"
)

func main() {
	if config.HelpRequested(os.Args[1:]) {
		usage := "usage: function\n  serves the stage named by STAGE (" + strings.Join(catalog.Stages(), ", ") + ") as a CloudEvents function\n" +
			"  on LISTEN_ADDRESS ([::]:8080 when unset); configured by the environment only"
		if err := config.PrintUsage(os.Stdout, usage, &config.StageFunction{}); err != nil {
			fmt.Fprintln(os.Stderr, "function:", err)
			os.Exit(1)
		}
		return
	}
	if err := newService(function.New()).Start(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "function:", err)
		os.Exit(1)
	}
	// func-go says "function stopping" (at debug level) before it drains
	// and nothing after: this line, in the function's own JSON format, is
	// what tells a stop that answered every request in flight and ran Stop
	// from one killed half-way.
	slog.New(slog.NewJSONHandler(os.Stderr, nil)).Info("function stopped")
}

// newService wraps f in func-go's service with two changes.
//
// No write timeout: a stage answers only when its work has committed, and
// render or transcode work takes minutes; func-go's 30 s would drop such an
// answer and the adapter would deliver the event again. A request is
// bounded instead by the Knative Service's timeoutSeconds and by the
// adapter, which cancels it after SOURCE_HANDLER_TIMEOUT.
//
// Events go to f through [stage.HTTPHandler] instead of func-go's handler, which
// hands every request to a shared unbuffered channel (cloudevents/sdk-go's
// NewHTTPReceiveHandler, v2.16.2): under concurrent requests a request's
// event can be taken by another request's goroutine, and one request is
// then left waiting for the next one to arrive, or for its caller's
// timeout (cloudevents/sdk-go issues 1224 and 1332). func-go's health
// endpoints and lifecycle stay as they are.
func newService(f *function.Function) *fcloudevents.Service {
	svc := fcloudevents.New(f)
	svc.WriteTimeout = 0
	mux := http.NewServeMux()
	mux.HandleFunc("/health/readiness", svc.Ready)
	mux.HandleFunc("/health/liveness", svc.Alive)
	// A Knative Service exposes one port, so the stage's metrics share it.
	mux.Handle("GET /metrics", promhttp.HandlerFor(newRegistry(), promhttp.HandlerOpts{}))
	mux.Handle("/", stage.HTTPHandler(f.Handle))
	svc.Handler = mux
	return svc
}

// newRegistry holds the series of the code every stage runs
// ([functions.StageCollectors]), the same list local serves: which stage
// STAGE picks changes which of them move, not which exist.
func newRegistry() *prometheus.Registry {
	return telemetry.NewRegistry(functions.StageCollectors()...)
}
