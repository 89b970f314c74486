// Package function is the module's knative func entry (func.yaml: runtime go,
// invoke cloudevent): func-go's instanced style, where [New] returns the
// instance and func-go serves its Handle over HTTP CloudEvents.
//
// One image serves every stage: the STAGE variable picks which.
package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Function serves the stage named by STAGE.
type Function struct {
	logger *slog.Logger

	mu        sync.RWMutex
	stage     *stage.Function
	closeDeps func()
}

// New returns the function instance; func-go then calls Start with its
// configuration (the environment and an optional cfg file).
func New() *Function {
	return &Function{logger: slog.New(slog.NewJSONHandler(os.Stderr, nil))}
}

// Start builds the stage named by cfg["STAGE"] with the resources the
// environment configures (config.StageFunction).
func (f *Function) Start(ctx context.Context, cfg map[string]string) error {
	name := cfg["STAGE"]
	if name == "" {
		return errors.New("STAGE is not set: name the stage this function serves (submit, poll, fetch, probe, transcode, render, settle, notify, reconcile)")
	}
	if !slices.Contains(catalog.Stages(), name) {
		return fmt.Errorf("unknown stage %q: set STAGE to one of %s", name, strings.Join(catalog.Stages(), ", "))
	}
	var conf config.StageFunction
	if err := config.Load(&conf); err != nil {
		return fmt.Errorf("start function: %w", err)
	}
	conf.Stage = name
	tracing, err := telemetry.SetupTracing(ctx, "aivedio-"+name)
	if err != nil {
		return fmt.Errorf("start function: %w", err)
	}
	deps, closeDeps, err := functions.Open(ctx, conf, f.logger)
	if err != nil {
		tracing.Close()
		return fmt.Errorf("start function: %w", err)
	}
	s, err := functions.New(ctx, name, deps)
	if err != nil {
		closeDeps()
		tracing.Close()
		return fmt.Errorf("start function: %w", err)
	}
	f.mu.Lock()
	f.stage, f.closeDeps = s, func() { closeDeps(); tracing.Close() }
	f.mu.Unlock()
	f.logger.InfoContext(ctx, "function started", slog.String("stage", name))
	return nil
}

// Stop releases the stage's resources; func-go calls it after serving
// stopped. Safe without Start and more than once.
func (f *Function) Stop(ctx context.Context) error {
	f.mu.Lock()
	closeDeps := f.closeDeps
	f.stage, f.closeDeps = nil, nil
	f.mu.Unlock()
	if closeDeps != nil {
		closeDeps()
	}
	return nil
}

// Handle delegates to the stage. func-go runs Start concurrently with
// serving, so an event can arrive before the stage exists: it gets a 503,
// which the adapter retries like any cold start.
func (f *Function) Handle(ctx context.Context, ev event.Event) (*event.Event, error) {
	f.mu.RLock()
	s := f.stage
	f.mu.RUnlock()
	if s == nil {
		return nil, cehttp.NewResult(http.StatusServiceUnavailable, "function is starting: no stage yet")
	}
	return s.Handle(ctx, ev)
}

// Ready reports whether the stage has been built.
func (f *Function) Ready(ctx context.Context) (bool, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.stage != nil, nil
}
