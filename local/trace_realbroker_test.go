//go:build !race

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// TestRealBrokerOneTracePerGenerationAndRender: with an in-memory exporter, one
// generation, and then one render of its output, over the real RocketMQ
// proxy is each one connected trace, from the
// API's POST /v1/generations span to the settle and notify stages: every
// hop (outbox row, relay publish, broker wait, source receive and
// delivery, stage, inbox transaction) is the child of the one before it,
// and the provider's callback, which arrives without our trace, continues
// the task's. Not parallel: the tracer provider is process-wide.
func TestRealBrokerOneTracePerGenerationAndRender(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", servicetest.Env(t, "RocketMQ", "ROCKETMQ_ENDPOINT"))
	spans := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	previous := otel.GetTracerProvider()
	telemetry.Install(provider)
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()); otel.SetTracerProvider(previous) })

	o := defaultOptions()
	o.apiAddr, o.opsAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.logFormat = "json"
	o.logTo = t.Output()
	o.sim.JobDurationMin, o.sim.JobDurationMax = 500*time.Millisecond, time.Second
	o.sim.CacheDir = t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	env, err := start(ctx, o)
	require.NoError(t, err)
	defer env.close()

	body := fmt.Sprintf(`{"model":%q,"prompt":"a traced fox","duration_seconds":2,"resolution":"1280x720"}`, env.models[0])
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.apiURL+"/v1/generations", bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+env.devKey)
	req.Header.Set("Idempotency-Key", "traced-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var created struct {
		TaskID string `json:"task_id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&created))
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	traceparent := resp.Header.Get("Traceparent")
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, traceparent, "the API returns the trace it started")
	traceID := traceparent[3:35]

	status := waitTerminal(t, ctx, env, created.TaskID)
	require.Equal(t, "SUCCEEDED", status)

	// Settle and notify run after SUCCEEDED is visible: wait for their spans.
	var chain []tracetest.SpanStub
	require.Eventually(t, func() bool {
		chain = spansOf(spans.GetSpans(), traceID)
		stages := stagesIn(chain)
		return slices.Contains(stages, "settle") && slices.Contains(stages, "notify") && connected(chain)
	}, time.Minute, 200*time.Millisecond, "settle and notify spans of trace %s, and every parent ended", traceID)

	requireConnected(t, chain, "POST /v1/generations")
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range chain {
		byID[s.SpanContext.SpanID()] = s
	}

	for _, stage := range []string{"submit", "poll", "fetch", "probe", "transcode", "settle", "notify"} {
		require.Contains(t, stagesIn(chain), stage, "stage %s is in the trace", stage)
	}
	names := map[string]int{}
	for _, s := range chain {
		first := strings.Fields(s.Name)[0]
		names[first]++
	}
	for _, hop := range []string{"publish", "wait", "receive", "deliver", "inbox", "replicate", "s3", "ffprobe", "ffmpeg"} {
		require.Positive(t, names[hop], "a %q span is in the trace (spans by first word: %v)", hop, names)
	}
	// A stage's span is the child of the source adapter's delivery, which
	// is the child of the receive, which is the child of the relay's
	// publish: the broker hop is one connected step.
	for _, s := range chain {
		if stage := attr(s, "aivedio.stage"); stage != "" {
			deliver := byID[s.Parent.SpanID()]
			require.True(t, strings.HasPrefix(deliver.Name, "deliver "), "stage %s's parent is %q", stage, deliver.Name)
			receive := byID[deliver.Parent.SpanID()]
			require.True(t, strings.HasPrefix(receive.Name, "receive "), "delivery's parent is %q", receive.Name)
			publish := byID[receive.Parent.SpanID()]
			require.True(t, strings.HasPrefix(publish.Name, "publish "), "receive's parent is %q", publish.Name)
		}
	}
	t.Logf("trace %s: %d spans; by first word %v", traceID, len(chain), names)

	// The render of a timeline of that output and an upload is one trace
	// too, from POST /v1/renders through start, every chunk and the join
	// to its settle.
	taskID, err := uuid.Parse(created.TaskID)
	require.NoError(t, err)
	clips, err := drive.OutputsOf(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey}, drive.Result{Tasks: []uuid.UUID{taskID}, Final: map[uuid.UUID]string{taskID: "SUCCEEDED"}}, 1)
	require.NoError(t, err)
	upload := filepath.Join(t.TempDir(), "upload.mp4")
	require.NoError(t, makeClip(ctx, upload))
	renders, err := drive.Renders(ctx, drive.RenderParams{APIURL: env.apiURL, Key: env.devKey, Clips: clips, Upload: upload,
		N: 1, Timeout: 3 * time.Minute, Pool: env.pool})
	require.NoError(t, err)
	require.Empty(t, renders.Violations)
	var renderParent string
	require.NoError(t, env.pool.QueryRow(ctx, `SELECT trace_parent FROM render_jobs WHERE render_job_id = $1`, renders.Renders[0].ID).Scan(&renderParent))
	renderTrace := renderParent[3:35]
	var steps map[string]int
	require.Eventually(t, func() bool {
		chain = spansOf(spans.GetSpans(), renderTrace)
		steps = map[string]int{}
		for _, s := range chain {
			steps[attr(s, "aivedio.stage")]++
		}
		return steps["settle"] > 0 && connected(chain)
	}, time.Minute, 200*time.Millisecond, "the render's settle span in trace %s, and every parent ended", renderTrace)
	requireConnected(t, chain, "POST /v1/renders")
	// start, at least one chunk, and the join.
	require.GreaterOrEqual(t, steps["render"], 3, "render stage spans: %v", steps)
	t.Logf("render trace %s: %d spans; stages %v", renderTrace, len(chain), steps)
}

// connected reports whether every span's parent is among spans: a span
// reaches the exporter when it ends, so the delivery and receive spans of
// the last stage come a little after the stage's own.
func connected(spans []tracetest.SpanStub) bool {
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	for _, s := range spans {
		if s.Parent.IsValid() && !ids[s.Parent.SpanID()] {
			return false
		}
	}
	return true
}

// requireConnected fails unless spans are one trace rooted at a span named
// root: every other span's parent is among them.
func requireConnected(t *testing.T, spans []tracetest.SpanStub, root string) {
	t.Helper()
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []string
	for _, s := range spans {
		if !s.Parent.IsValid() {
			roots = append(roots, s.Name)
			continue
		}
		require.True(t, ids[s.Parent.SpanID()], "span %q has parent %s, which is not in the trace: the trace is broken there", s.Name, s.Parent.SpanID())
	}
	require.Equal(t, []string{root}, roots, "one trace, rooted at the API request")
}

// waitTerminal polls the task until it ends and returns its status.
func waitTerminal(t *testing.T, ctx context.Context, env *environment, taskID string) string {
	t.Helper()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, env.apiURL+"/v1/generations/"+taskID, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+env.devKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var got struct {
			Status string `json:"status"`
		}
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
		require.NoError(t, resp.Body.Close())
		switch got.Status {
		case "SUCCEEDED", "FAILED", "CANCELED", "CANCELED_WITH_OUTPUT", "NEEDS_ATTENTION":
			return got.Status
		}
		select {
		case <-ctx.Done():
			t.Fatalf("task %s still %s: %v", taskID, got.Status, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func spansOf(all tracetest.SpanStubs, traceID string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range all {
		if s.SpanContext.TraceID().String() == traceID {
			out = append(out, s)
		}
	}
	return out
}

func stagesIn(spans []tracetest.SpanStub) []string {
	var out []string
	for _, s := range spans {
		if stage := attr(s, "aivedio.stage"); stage != "" && !slices.Contains(out, stage) {
			out = append(out, stage)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key attribute.Key) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.AsString()
		}
	}
	return ""
}
