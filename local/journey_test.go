package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// journeyGenerations is how many generations an end-to-end run drives.
const journeyGenerations = 50

// faultyProvider turns on every simulator fault the journey must survive,
// at least at the rates issue #4 names, with slow and failing jobs.
func faultyProvider(t *testing.T) options {
	t.Helper()
	o := defaultOptions()
	o.apiAddr, o.opsAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.logFormat = "json"
	o.sim.Rate429 = 0.12
	o.sim.RateDrop = 0.08
	o.sim.Rate5xx = 0.03
	o.sim.RateFail = 0.04
	o.sim.JobDurationMin = 500 * time.Millisecond
	o.sim.JobDurationMax = 8 * time.Second
	o.sim.OutputNotReady = 300 * time.Millisecond
	o.sim.RetryAfter = time.Second
	o.sim.Seed = time.Now().UnixNano()
	t.Logf("simulators' seed %d (set it in faultyProvider to replay this run's faults)", o.sim.Seed)
	o.sim.CacheDir = t.TempDir()
	// Content review on, with a reviewer that rejects some outputs and is
	// sometimes unavailable (docs/journey.md, "Content review").
	o.review = true
	o.reviewSim.RejectRate = 0.06
	o.reviewSim.Rate5xx = 0.08
	o.reviewSim.Rate429 = 0.05
	o.reviewSim.RateMalformed = 0.03
	o.reviewSim.Latency = 20 * time.Millisecond
	o.reviewSim.Seed = o.sim.Seed
	o.logTo = t.Output()
	return o
}

// realServices points the environment at the test services, each test on a
// schema of its own; fast retries and polls keep the run short.
func realServices(t *testing.T) {
	t.Setenv("DATABASE_URL", dbtest.TestSchemaURL(t))
	for _, v := range []string{"REDIS_URL", "S3_ENDPOINT", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"} {
		t.Setenv(v, servicetest.Env(t, "journey services", v))
	}
	t.Setenv("POLL_FIRST_DELAY", "1s")
	t.Setenv("POLL_MAX_INTERVAL", "3s")
	t.Setenv("SUBMIT_RETRY_BASE", "500ms")
	t.Setenv("SUBMIT_RETRY_MAX", "4s")
	t.Setenv("FETCH_RETRY_BASE", "500ms")
	t.Setenv("FETCH_RETRY_MAX", "4s")
	t.Setenv("RECONCILE_DELAY", "2s")
	t.Setenv("LOCAL_DATA_DIR", t.TempDir())
}

// runJourney drives journeyGenerations through the API of a started
// pipeline and fails the test on any broken invariant.
func runJourney(t *testing.T, o options) {
	t.Helper()
	logs := &syncBuffer{}
	o.logTo = io.MultiWriter(t.Output(), logs)
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	env, err := start(ctx, o)
	require.NoError(t, err)
	defer env.close()

	res, err := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: journeyGenerations, Models: env.models,
		CancelShare: 0.1, Timeout: 6 * time.Minute})
	if err != nil {
		explainStuck(t, env)
	}
	require.NoError(t, err)
	stats := env.sim.Stats()
	facts := env.facts()
	facts.Failed = drive.FailedUnder(env.reviewSim, env.sim, env.runwaySim)
	rep, err := drive.Check(ctx, facts, res)
	require.NoError(t, err)
	if o.review {
		rs := env.reviewSim.Stats()
		t.Logf("reviewer: %+v", rs)
		require.Positive(t, rs.Approved, "the reviewer approved outputs")
		require.Positive(t, rs.FramesFetched, "the reviewer fetched the frames it was shown")
		require.Zero(t, rs.FrameFailures, "every frame URL served a JPEG")
		require.Zero(t, rs.BadSignature, "every request was signed with the shared secret")
		require.Zero(t, rs.BadRequest)
	}
	t.Logf("%d generations in %s: %v; attempts %d, max jobs per key %d, credits charged %d; faults %+v",
		len(res.Tasks), res.Elapsed.Round(time.Second), rep.ByStatus, rep.Attempts, rep.MaxJobsPerKey, rep.CreditsCharged, stats.Faults)
	require.Empty(t, rep.Violations)
	require.Len(t, res.Tasks, journeyGenerations)
	// A tenth is canceled, and the simulators fail or refuse about one in
	// ten of the rest: far more than half succeed, whatever the seed.
	require.GreaterOrEqual(t, rep.ByStatus["SUCCEEDED"], journeyGenerations/2, "with these fault rates most generations succeed")
	require.Positive(t, stats.Faults.RateLimited+stats.Faults.Dropped+stats.Faults.ServerErrors, "the faults were injected")

	// The export journey on the same pipeline: an upload and generated
	// clips rendered in every profile, and once more for identical content.
	clips, err := drive.OutputsOf(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey}, res, 2)
	require.NoError(t, err)
	upload := filepath.Join(t.TempDir(), "upload.mp4")
	require.NoError(t, makeClip(ctx, upload))
	renders, err := drive.Renders(ctx, drive.RenderParams{APIURL: env.apiURL, Key: env.devKey, Clips: clips, Upload: upload,
		N: len(drive.RenderProfiles) + 1, Timeout: 4 * time.Minute, Pool: env.pool})
	require.NoError(t, err)
	t.Logf("%d renders of %.2f s in %s", len(renders.Renders), renders.DurationSeconds, renders.Elapsed.Round(time.Second))
	require.Empty(t, renders.Violations)
	require.True(t, renders.Renders[len(drive.RenderProfiles)].Reused, "identical content reuses the stored output")

	// One /metrics for the whole pipeline: the stages', the adapters' and
	// the API's series; /readyz reaches PostgreSQL and Redis.
	metrics := get(t, env.opsURL+"/metrics")
	for _, series := range []string{"aivedio_stage_work_duration_seconds", "aivedio_adapter_deliveries_total", "aivedio_relay_",
		"aivedio_inbox_outcomes_total", "aivedio_media_cpu_seconds_total", "aivedio_render_chunks_total", "aivedio_review_calls_total", "api_request_duration_seconds"} {
		require.Contains(t, metrics, series)
	}
	require.Equal(t, "ok\n", get(t, env.opsURL+"/readyz"))
	require.Equal(t, "ok\n", get(t, env.opsURL+"/healthz"))

	// No prompt, API key or presigned URL in any log line of the run.
	text := logs.String()
	require.NotEmpty(t, text)
	for _, secret := range []string{drive.PromptMarker, env.devKey, "X-Amz-Signature", "X-Amz-Credential"} {
		require.NotContains(t, text, secret, "a log line leaks %q", secret)
	}
}

// get is the body of a 200 answer to GET url.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", url, body)
	return string(body)
}

// explainStuck logs the timeline and attempts of every task that did not
// end, so a failed run says where each one stopped.
func explainStuck(t *testing.T, env *environment) {
	t.Helper()
	ctx := context.WithoutCancel(t.Context())
	rows, err := env.pool.Query(ctx, `SELECT t.task_id, t.status, t.version, t.updated_at, t.next_retry_at, t.next_poll_at,
		(SELECT string_agg(e.version || ':' || coalesce(e.from_status, '-') || '>' || e.to_status || ' ' || coalesce(e.reason, ''), ' | ' ORDER BY e.version)
		   FROM task_events e WHERE e.task_id = t.task_id),
		(SELECT string_agg(a.attempt_no || ':' || a.status || ' ' || coalesce(a.error_code, '') || ' job=' || coalesce(a.provider_job_id, ''), ' | ' ORDER BY a.attempt_no)
		   FROM task_attempts a WHERE a.task_id = t.task_id)
		FROM generation_tasks t WHERE t.status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'CANCELED_WITH_OUTPUT', 'NEEDS_ATTENTION')`)
	if err != nil {
		t.Logf("explain stuck tasks: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, status, timeline, attempts string
		var version int64
		var updated time.Time
		var retry, poll *time.Time
		var tl, at *string
		if err := rows.Scan(&id, &status, &version, &updated, &retry, &poll, &tl, &at); err != nil {
			t.Logf("explain stuck tasks: %v", err)
			return
		}
		if tl != nil {
			timeline = *tl
		}
		if at != nil {
			attempts = *at
		}
		t.Logf("STUCK %s %s v%d updated %s ago next_retry_at=%v next_poll_at=%v\n  timeline: %s\n  attempts: %s",
			id, status, version, time.Since(updated).Round(time.Second), retry, poll, timeline, attempts)
	}
	var pending int
	_ = env.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE published_at IS NULL`).Scan(&pending)
	var quarantined string
	_ = env.pool.QueryRow(ctx, `SELECT coalesce(string_agg(consumer_name || ' ' || error_code, ', '), '') FROM message_quarantine`).Scan(&quarantined)
	t.Logf("unpublished outbox rows: %d; quarantined: %s", pending, quarantined)
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of loggers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestJourneyOnEmulator runs the whole journey on the real PostgreSQL,
// Redis, S3 server, ffmpeg and the provider simulator, with the in-process
// broker emulator.
func TestJourneyOnEmulator(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", "")
	runJourney(t, faultyProvider(t))
}
