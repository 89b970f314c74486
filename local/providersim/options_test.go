package providersim_test

import (
	"bytes"
	"flag"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
)

func TestOptionsFromEnvAndFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"PROVIDERSIM_RATE_429":         "0.25",
		"PROVIDERSIM_RETRY_AFTER":      "7s",
		"PROVIDERSIM_RATE_5XX":         "0.1",
		"PROVIDERSIM_RATE_DROP":        "0.05",
		"PROVIDERSIM_DROP_MODE":        "hang",
		"PROVIDERSIM_JOB_DURATION_MIN": "1s",
		"PROVIDERSIM_JOB_DURATION_MAX": "3s",
		"PROVIDERSIM_RATE_FAIL":        "0.2",
		"PROVIDERSIM_OUTPUT_NOT_READY": "500ms",
		"PROVIDERSIM_OUTPUT_TTL":       "10m",
		"PROVIDERSIM_SEED":             "99",
		"PROVIDERSIM_MAX_JOBS":         "50",
		"PROVIDERSIM_API_TOKEN":        "s3cr3t-t0k",

		"PROVIDERSIM_RATE_CONTENT_REJECT_SUBMIT": "0.3",
		"PROVIDERSIM_RATE_CONTENT_FAIL":          "0.4",
		"PROVIDERSIM_THROTTLE_ABOVE":             "5",
		"PROVIDERSIM_THROTTLE_FOR":               "2s",
		"PROVIDERSIM_RUNWAY_VERSION":             "2025-01-01",
	}
	o := providersim.DefaultOptions()
	require.NoError(t, o.LoadEnv(func(k string) string { return env[k] }))

	want := providersim.DefaultOptions()
	want.Rate429, want.RetryAfter, want.Rate5xx, want.RateDrop, want.DropMode = 0.25, 7*time.Second, 0.1, 0.05, providersim.DropHang
	want.JobDurationMin, want.JobDurationMax, want.RateFail = time.Second, 3*time.Second, 0.2
	want.OutputNotReady, want.OutputTTL, want.Seed, want.MaxJobs, want.APIToken = 500*time.Millisecond, 10*time.Minute, 99, 50, "s3cr3t-t0k"
	want.RateContentRejectSubmit, want.RateContentFail, want.ThrottleAbove, want.ThrottleFor = 0.3, 0.4, 5, 2*time.Second
	want.RunwayVersion = "2025-01-01"
	require.Equal(t, want, o)
	require.NoError(t, o.Validate())

	// Flags parsed after the environment win.
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	o.RegisterFlags(fs)
	require.NoError(t, fs.Parse([]string{"-providersim-rate-429=1", "-providersim-drop-mode", "close"}))
	require.Equal(t, 1.0, o.Rate429)
	require.Equal(t, providersim.DropClose, o.DropMode)
	require.Equal(t, 0.1, o.Rate5xx)

	var help bytes.Buffer
	fs.SetOutput(&help)
	fs.PrintDefaults()
	require.Contains(t, help.String(), "PROVIDERSIM_RATE_5XX")
	require.NotContains(t, help.String(), "s3cr3t", "a secret never shows in -help")
}

func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	o := providersim.DefaultOptions()
	err := o.LoadEnv(func(k string) string {
		return map[string]string{"PROVIDERSIM_RATE_FAIL": "2", "PROVIDERSIM_OUTPUT_TTL": "soon"}[k]
	})
	require.ErrorContains(t, err, "PROVIDERSIM_RATE_FAIL")
	require.ErrorContains(t, err, "PROVIDERSIM_OUTPUT_TTL")

	for _, edit := range []func(*providersim.Options){
		func(o *providersim.Options) { o.Rate5xx = -0.1 },
		func(o *providersim.Options) { o.DropMode = "explode" },
		func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = time.Second, time.Millisecond },
		func(o *providersim.Options) { o.WebhookSecret = "not-whsec" },
		func(o *providersim.Options) { o.FFmpegPath = "/nonexistent/ffmpeg" },
	} {
		o := providersim.DefaultOptions()
		edit(&o)
		_, err := providersim.New(o, nil)
		require.Error(t, err)
	}
}
