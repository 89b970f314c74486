package runway_test

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/runway"
)

// TestMain fails the run when goroutines outlive the tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const simToken = "sim-token"

type simBundle struct {
	sim    *providersim.Server
	client *runway.Client
}

// simSetup starts a simulator and points a client at it.
func simSetup(t *testing.T, edit func(*providersim.Options), editClient func(*runway.Config)) *simBundle {
	t.Helper()
	o := providersim.DefaultOptions()
	o.APIToken = simToken
	o.JobDurationMin, o.JobDurationMax = 50*time.Millisecond, 100*time.Millisecond
	if edit != nil {
		edit(&o)
	}
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	sim, err := providersim.New(o, logger)
	require.NoError(t, err)
	base, err := sim.Start(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	cfg := runway.Config{BaseURL: base, APIToken: simToken, Timeout: 2 * time.Second, Logger: logger, Outputs: provider.OutputGuard{AllowPrivate: true}}
	if editClient != nil {
		editClient(&cfg)
	}
	c, err := runway.New(cfg)
	require.NoError(t, err)
	t.Cleanup(c.CloseIdleConnections)
	return &simBundle{sim: sim, client: c}
}

func (b *simBundle) wait(t *testing.T, id string, done func(provider.Job) bool) provider.Job {
	t.Helper()
	var job provider.Job
	require.Eventually(t, func() bool {
		var err error
		job, err = b.client.Get(t.Context(), id)
		require.NoError(t, err)
		return done(job)
	}, 10*time.Second, 10*time.Millisecond)
	return job
}

func terminal(j provider.Job) bool { return j.Status.Terminal() }

func TestAgainstSimulator(t *testing.T) {
	t.Parallel()
	t.Run("a task runs, succeeds and downloads", func(t *testing.T) {
		b := simSetup(t, nil, nil)
		job, err := b.client.Submit(t.Context(), validRequest())
		require.NoError(t, err)
		require.Equal(t, provider.StatusQueued, job.Status)
		done := b.wait(t, job.ID, terminal)
		require.Equal(t, provider.StatusSucceeded, done.Status)
		require.WithinDuration(t, time.Now().Add(time.Hour), done.OutputExpiresAt, 5*time.Second, "expiry read from the signed URL")
		out, err := b.client.Download(t.Context(), done)
		require.NoError(t, err)
		data, err := io.ReadAll(out.Body)
		require.NoError(t, err)
		require.NoError(t, out.Body.Close())
		require.Equal(t, "video/mp4", out.ContentType)
		require.Greater(t, len(data), 1000)
		st := b.sim.Stats()
		require.Equal(t, 1, st.JobsCreatedByFormat[providersim.FormatRunway])
		require.Equal(t, 1, st.JobsByPrompt[validRequest().Prompt])
	})
	t.Run("a throttled task is a queued job marked throttled", func(t *testing.T) {
		b := simSetup(t, func(o *providersim.Options) {
			o.ThrottleAbove, o.ThrottleFor = 1, time.Minute
			o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute
		}, nil)
		_, err := b.client.Submit(t.Context(), validRequest())
		require.NoError(t, err)
		second, err := b.client.Submit(t.Context(), validRequest())
		require.NoError(t, err)
		got, err := b.client.Get(t.Context(), second.ID)
		require.NoError(t, err)
		require.Equal(t, provider.StatusQueued, got.Status)
		require.True(t, got.Throttled)
	})
	t.Run("cancel stops a running task and leaves a finished one", func(t *testing.T) {
		b := simSetup(t, func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute }, nil)
		job, err := b.client.Submit(t.Context(), validRequest())
		require.NoError(t, err)
		canceled, err := b.client.Cancel(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, provider.StatusCanceled, canceled.Status)
		again, err := b.client.Cancel(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, provider.StatusCanceled, again.Status)
		_, err = b.client.Get(t.Context(), job.ID)
		require.NoError(t, err, "a second cancel must not delete the finished task")
		_, err = b.client.Get(t.Context(), "00000000-0000-4000-8000-000000000000")
		requireClass(t, err, provider.ClassNotFound)
	})
	t.Run("moderation at create and of the output", func(t *testing.T) {
		b := simSetup(t, nil, nil)
		req := validRequest()
		req.Prompt = "a scene " + providersim.MarkerContentRejectedAtSubmit
		_, err := b.client.Submit(t.Context(), req)
		pe := requireClass(t, err, provider.ClassContentRejected)
		require.Equal(t, "SAFETY.INPUT.TEXT", pe.Code)
		require.NotContains(t, err.Error(), "a scene")

		req.Prompt = "a scene " + providersim.MarkerContentRejectedOutput
		job, err := b.client.Submit(t.Context(), req)
		require.NoError(t, err)
		done := b.wait(t, job.ID, terminal)
		require.Equal(t, provider.StatusFailed, done.Status)
		require.True(t, done.ContentRejected)
		require.Equal(t, "SAFETY.OUTPUT.VIDEO", done.ErrorCode)
	})
	t.Run("an ordinary failure is not moderation", func(t *testing.T) {
		b := simSetup(t, func(o *providersim.Options) { o.RateFail = 1 }, nil)
		job, err := b.client.Submit(t.Context(), validRequest())
		require.NoError(t, err)
		done := b.wait(t, job.ID, terminal)
		require.Equal(t, provider.StatusFailed, done.Status)
		require.False(t, done.ContentRejected)
	})
	t.Run("429 carries the wait", func(t *testing.T) {
		b := simSetup(t, func(o *providersim.Options) { o.Rate429, o.RetryAfter = 1, 3*time.Second }, nil)
		_, err := b.client.Submit(t.Context(), validRequest())
		pe := requireClass(t, err, provider.ClassRateLimited)
		require.Equal(t, 3*time.Second, pe.RetryAfter)
	})
	t.Run("503 is unavailable and started nothing", func(t *testing.T) {
		b := simSetup(t, func(o *providersim.Options) { o.Rate5xx = 1 }, nil)
		_, err := b.client.Submit(t.Context(), validRequest())
		requireClass(t, err, provider.ClassUnavailable)
		require.Zero(t, b.sim.Stats().JobsCreated)
	})
	for _, mode := range []string{providersim.DropClose, providersim.DropHang} {
		t.Run("a dropped answer is timeout-unknown and a task exists: "+mode, func(t *testing.T) {
			b := simSetup(t, func(o *providersim.Options) { o.RateDrop, o.DropMode = 1, mode },
				func(c *runway.Config) { c.Timeout = 300 * time.Millisecond })
			_, err := b.client.Submit(t.Context(), validRequest())
			requireClass(t, err, provider.ClassTimeoutUnknown)
			require.Equal(t, 1, b.sim.Stats().JobsByPrompt[validRequest().Prompt])
			_, err = b.client.FindByClientRequestID(t.Context(), validRequest().ClientRequestID, time.Now().Add(-time.Minute))
			pe := requireClass(t, err, provider.ClassRejected)
			require.Equal(t, runway.CodeLookupUnsupported, pe.Code)
		})
	}
	t.Run("output not ready, then expired", func(t *testing.T) {
		b := simSetup(t, func(o *providersim.Options) {
			o.OutputNotReady, o.OutputTTL = 300*time.Millisecond, 1500*time.Millisecond
		}, nil)
		job, err := b.client.Submit(t.Context(), validRequest())
		require.NoError(t, err)
		done := b.wait(t, job.ID, terminal)
		_, err = b.client.Download(t.Context(), done)
		requireClass(t, err, provider.ClassOutputNotReady)
		// Past the URL's own expiry: refused without a request.
		require.Eventually(t, func() bool {
			_, err = b.client.Download(t.Context(), done)
			return provider.ClassOf(err) == provider.ClassOutputExpired
		}, 5*time.Second, 20*time.Millisecond)
		// A job that does not know its expiry learns it from the CDN's 403.
		done.OutputExpiresAt = time.Time{}
		_, err = b.client.Download(t.Context(), done)
		pe := requireClass(t, err, provider.ClassOutputExpired)
		require.Equal(t, 403, pe.StatusCode)
	})
	t.Run("the version header is required", func(t *testing.T) {
		b := simSetup(t, nil, func(c *runway.Config) { c.APIVersion = "2020-01-01" })
		_, err := b.client.Submit(t.Context(), validRequest())
		requireClass(t, err, provider.ClassRejected)
	})
}
