package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/shared/catalog"
)

// This file holds how the world starts every binary as its own process,
// waits for each to be ready, ticks the reconciler, and stops them.

// startAll starts every process and waits until the API and the stage
// functions answer.
func (w *world) startAll(ctx context.Context) error {
	apiPort, err := freePort()
	if err != nil {
		return err
	}
	w.apiURL = fmt.Sprintf("http://127.0.0.1:%d", apiPort)
	base := append(w.baseEnv(), "PROVIDER_CALLBACK_URL="+w.apiURL+"/v1/provider-callbacks/{provider}")
	var apiOps int
	add := func(name, kind, bin string, args []string, env ...string) error {
		ops, err := freePort()
		if err != nil {
			return err
		}
		if kind == "api" {
			apiOps = ops
		}
		logs, err := os.OpenFile(filepath.Join(w.runDir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		w.closed = append(w.closed, func() { _ = logs.Close() })
		p := &proc{name: name, kind: kind, bin: filepath.Join(w.runDir, "bin", bin), args: args, logs: logs,
			env: append(append(append([]string{}, base...), fmt.Sprintf("HTTP_ADDR=127.0.0.1:%d", ops)), env...)}
		if err := p.start(); err != nil {
			return err
		}
		w.procs = append(w.procs, p)
		return nil
	}
	if err := add("api", "api", "api", nil, fmt.Sprintf("API_ADDR=127.0.0.1:%d", apiPort), "API_MODELS="+model); err != nil {
		return err
	}
	for _, stage := range catalog.Stages() {
		port, err := freePort()
		if err != nil {
			return err
		}
		w.funcURLs[stage] = fmt.Sprintf("http://127.0.0.1:%d", port)
		if err := add("function-"+stage, "function", "function", nil, "STAGE="+stage, fmt.Sprintf("LISTEN_ADDRESS=127.0.0.1:%d", port)); err != nil {
			return err
		}
	}
	for i := range 2 {
		if err := add(fmt.Sprintf("relay-%d", i+1), "relay", "adapter", []string{"relay"}, fmt.Sprintf("RELAY_OWNER=chaos-relay-%d", i+1)); err != nil {
			return err
		}
	}
	for _, g := range catalog.Groups() {
		invisible, timeout := deliveryBudget(g.Stage)
		sourceEnv := []string{"SOURCE_WORKERS=8", "SOURCE_INVISIBLE=" + invisible.String(),
			"SOURCE_HANDLER_TIMEOUT=" + timeout.String(), "SOURCE_COLD_START=10s"}
		if err := add("source-"+g.Stage+"-"+g.BrokerName(), "source", "adapter",
			[]string{"source", "--group", g.Name, "--sink", w.funcURLs[g.Stage]}, sourceEnv...); err != nil {
			return err
		}
		w.procs[len(w.procs)-1].stage = g.Stage
		if err := add("drain-"+g.BrokerName(), "drain", "adapter", []string{"dlq", "drain", "--group", g.Name}); err != nil {
			return err
		}
	}
	for _, u := range append([]string{fmt.Sprintf("http://127.0.0.1:%d/readyz", apiOps)}, w.funcReadiness()...) {
		if err := waitOK(ctx, u, time.Minute); err != nil {
			return fmt.Errorf("%w (logs in %s)", err, filepath.Join(w.runDir, "logs"))
		}
	}
	tctx, cancel := context.WithCancel(ctx)
	w.ticker = cancel
	go w.tick(tctx)
	return nil
}

// mediaStages are the stages whose deliveries run ffmpeg.
var mediaStages = []string{"probe", "transcode", "review", "render"}

// deliveryBudget is the invisible time and handler timeout of the source
// of stage's group.
func deliveryBudget(stage string) (invisible, timeout time.Duration) {
	if slices.Contains(mediaStages, stage) {
		return mediaInvisible, mediaTimeout
	}
	return sourceInvisible, handlerTimeout
}

// model is the one model the run asks for.
const model = "minimax/video-01"

func (w *world) funcReadiness() []string {
	var out []string
	for _, u := range w.funcURLs {
		out = append(out, u+"/health/readiness")
	}
	return out
}

// waitOK polls u until it answers 200.
func waitOK(ctx context.Context, u string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within %s", u, within)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tick is the reconcile trigger Knative's PingSource is in a deployment:
// a scan event to the reconcile function, every reconcileTick.
func (w *world) tick(ctx context.Context) {
	t := time.NewTicker(reconcileTick)
	defer t.Stop()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n++
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.funcURLs[reconcile.Name], strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", fmt.Sprintf("chaos-tick-%d-%d", w.o.Seed, n))
		req.Header.Set("Ce-Source", "/chaos/ticker")
		req.Header.Set("Ce-Type", reconcile.ScanEventType)
		c := http.Client{Timeout: 30 * time.Second}
		if resp, err := c.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
}

// stopAll stops every process, the graceful way.
func (w *world) stopAll() {
	if w.ticker != nil {
		w.ticker()
	}
	var wg sync.WaitGroup
	for _, p := range w.procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(20 * time.Second) }()
	}
	wg.Wait()
}
