package main

import (
	"context"
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
	o.apiAddr = "127.0.0.1:0"
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
	o.sim.CacheDir = t.TempDir()
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
	t.Setenv("RECONCILE_DELAY", "2s")
	t.Setenv("LOCAL_DATA_DIR", t.TempDir())
}

// runJourney drives journeyGenerations through the API of a started
// pipeline and fails the test on any broken invariant.
func runJourney(t *testing.T, o options) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 8*time.Minute)
	defer cancel()
	env, err := start(ctx, o)
	require.NoError(t, err)
	defer env.close()

	res, err := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: journeyGenerations, Models: env.models,
		CancelShare: 0.1, Timeout: 6 * time.Minute})
	require.NoError(t, err)
	stats := env.sim.Stats()
	rep, err := drive.Check(ctx, drive.Facts{Pool: env.pool, Blob: env.blob, JobsByKey: stats.JobsByIdempotencyKey}, res)
	require.NoError(t, err)
	t.Logf("%d generations in %s: %v; attempts %d, max jobs per key %d, credits charged %d; faults %+v",
		len(res.Tasks), res.Elapsed.Round(time.Second), rep.ByStatus, rep.Attempts, rep.MaxJobsPerKey, rep.CreditsCharged, stats.Faults)
	require.Empty(t, rep.Violations)
	require.Len(t, res.Tasks, journeyGenerations)
	require.Positive(t, rep.ByStatus["SUCCEEDED"], "with these fault rates most generations succeed")
	require.Positive(t, stats.Faults.RateLimited+stats.Faults.Dropped+stats.Faults.ServerErrors, "the faults were injected")
}

// TestJourneyOnEmulator runs the whole journey on the real PostgreSQL,
// Redis, S3 server, ffmpeg and the provider simulator, with the in-process
// broker emulator.
func TestJourneyOnEmulator(t *testing.T) {
	realServices(t)
	t.Setenv("ROCKETMQ_ENDPOINT", "")
	runJourney(t, faultyProvider(t))
}
