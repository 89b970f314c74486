package replicate_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/provider/replicate"
)

// The tests in this file drive the client against the provider simulator
// over real HTTP.

// TestSimSubmitIsIdempotentWhereKeysAreHonoured: against a provider that
// honours Idempotency-Key (the simulator's opt-in mode), a resend reaches
// the first job. Replicate documents no such key, so the client does not
// claim it (provider.ResendSafe is false): TestSimResendIsANewJob.
func TestSimSubmitIsIdempotentWhereKeysAreHonoured(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.HonorIdempotencyKey = true }})
	req := submitRequest(t, "")

	first, err := b.client.Submit(t.Context(), req)
	require.NoError(t, err)
	again, err := b.client.Submit(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)

	st := b.stats(t)
	require.Equal(t, 1, st.JobsCreated)
	require.Equal(t, map[string]int{req.IdempotencyKey: 1}, st.JobsByIdempotencyKey)
	require.Equal(t, 1, st.IdempotentReplays)

	other := req
	other.Prompt = "something else entirely"
	_, err = b.client.Submit(t.Context(), other)
	requireClass(t, provider.ClassRejected, err)
	require.Equal(t, 1, b.stats(t).JobsCreated)
}

// TestSimResendIsANewJob: against a provider that behaves as Replicate
// (no idempotency key), a submit sent twice is two paid jobs, and the
// client says so: it is not resend-safe, so the pipeline looks a submit up
// by its client request id before it ever sends it again.
func TestSimResendIsANewJob(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{})
	req := submitRequest(t, "")
	first, err := b.client.Submit(t.Context(), req)
	require.NoError(t, err)
	again, err := b.client.Submit(t.Context(), req)
	require.NoError(t, err)
	require.NotEqual(t, first.ID, again.ID)
	require.Equal(t, map[string]int{req.IdempotencyKey: 2}, b.stats(t).JobsByIdempotencyKey)
	require.False(t, provider.ResendSafe(b.client), "Replicate documents no idempotency key")
}

// TestSimLifecycle follows one job from submit to downloaded output and
// its signed completion callback.
func TestSimLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{callbacks: true})
	req := submitRequest(t, b.callbackURL)

	job, err := b.client.Submit(t.Context(), req)
	require.NoError(t, err)
	require.Equal(t, provider.StatusQueued, job.Status)
	require.Equal(t, req.ClientRequestID, job.ClientRequestID)

	done := b.waitTerminal(t, job.ID)
	require.Equal(t, provider.StatusSucceeded, done.Status)
	require.Equal(t, req.ClientRequestID, done.ClientRequestID, "the simulator echoes the marked webhook")
	require.Equal(t, 100, done.Progress)
	require.NotEmpty(t, done.OutputURL)
	require.WithinDuration(t, time.Now().Add(time.Hour), done.OutputExpiresAt, 5*time.Second)

	data, out, err := download(t.Context(), b.client, done)
	require.NoError(t, err)
	require.Equal(t, "video/mp4", out.ContentType)
	require.Equal(t, out.ContentLength, int64(len(data)))
	require.Equal(t, "ftyp", string(data[4:8]), "an MP4 starts with its ftyp box")

	var cb callback
	select {
	case cb = <-b.callbacks:
	case <-time.After(10 * time.Second):
		t.Fatal("no completion callback")
	}
	require.NoError(t, cb.err)
	require.Equal(t, done.ID, cb.job.ID)
	require.Equal(t, provider.StatusSucceeded, cb.job.Status)
	require.Equal(t, req.ClientRequestID, cb.job.ClientRequestID)
	require.Equal(t, done.OutputURL, cb.job.OutputURL)

	t.Run("good signature again", func(t *testing.T) {
		_, err := b.client.ParseCallback(cb.header, cb.body, time.Now())
		require.NoError(t, err)
	})
	t.Run("bad signature", func(t *testing.T) {
		forged := append([]byte(nil), cb.body...)
		forged[len(forged)-2] ^= 1
		_, err := b.client.ParseCallback(cb.header, forged, time.Now())
		requireClass(t, provider.ClassRejected, err)
	})
	t.Run("stale timestamp", func(t *testing.T) {
		_, err := b.client.ParseCallback(cb.header, cb.body, time.Now().Add(6*time.Minute))
		requireClass(t, provider.ClassRejected, err)
	})
}

// TestSimWebhookRetries: a receiver that fails gets the same webhook again
// (same webhook-id), and the simulator stops once it is taken.
func TestSimWebhookRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{callbacks: true, callbackStatus: []int{500, 503}})
	job, err := b.client.Submit(t.Context(), submitRequest(t, b.callbackURL))
	require.NoError(t, err)

	var ids []string
	for range 3 {
		select {
		case cb := <-b.callbacks:
			require.NoError(t, cb.err)
			require.Equal(t, job.ID, cb.job.ID)
			ids = append(ids, cb.header.Get("webhook-id"))
		case <-time.After(10 * time.Second):
			t.Fatal("webhook not retried")
		}
	}
	require.Equal(t, []string{ids[0], ids[0], ids[0]}, ids)
	require.Eventually(t, func() bool { return b.stats(t).Webhooks.Delivered == 1 }, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, 2, b.stats(t).Webhooks.Retried)
}

func TestSimFind(t *testing.T) {
	t.Parallel()

	t.Run("found across pages, and not found", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{callbacks: true, sim: func(o *providersim.Options) { o.PageSize = 1 }})
		since := time.Now()
		var ids []string
		for i := range 3 {
			req := submitRequest(t, b.callbackURL)
			req.IdempotencyKey += string(rune('a' + i))
			req.ClientRequestID += string(rune('a' + i))
			job, err := b.client.Submit(t.Context(), req)
			require.NoError(t, err)
			ids = append(ids, job.ID)
		}
		oldest := submitRequest(t, "").ClientRequestID + "a" // newest first: on the last page

		job, err := b.client.FindByClientRequestID(t.Context(), oldest, since)
		require.NoError(t, err)
		require.Equal(t, ids[0], job.ID)
		require.Equal(t, oldest, job.ClientRequestID)

		_, err = b.client.FindByClientRequestID(t.Context(), "crid-never-sent", since)
		requireClass(t, provider.ClassNotFound, err)
		_, err = b.client.FindByClientRequestID(t.Context(), oldest, time.Now().Add(time.Hour))
		requireClass(t, provider.ClassNotFound, err) // created before the window
	})

	t.Run("ambiguous next to a job without a webhook", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		since := time.Now()
		_, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)

		_, err = b.client.FindByClientRequestID(t.Context(), "crid-never-sent", since)
		requireClass(t, provider.ClassRejected, err)
		var pe *provider.Error
		require.True(t, errors.As(err, &pe))
		require.Equal(t, replicate.CodeLookupAmbiguous, pe.Code)
	})
}

func TestSimCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{callbacks: true, sim: func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute }})
	job, err := b.client.Submit(t.Context(), submitRequest(t, b.callbackURL))
	require.NoError(t, err)

	canceled, err := b.client.Cancel(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, provider.StatusCanceled, canceled.Status)
	again, err := b.client.Cancel(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, canceled, again, "canceling twice changes nothing")
	got, err := b.client.Get(t.Context(), job.ID)
	require.NoError(t, err)
	require.Equal(t, provider.StatusCanceled, got.Status)

	select {
	case cb := <-b.callbacks:
		require.NoError(t, cb.err)
		require.Equal(t, provider.StatusCanceled, cb.job.Status)
	case <-time.After(10 * time.Second):
		t.Fatal("no callback for the cancel")
	}

	_, err = b.client.Cancel(t.Context(), "nosuchprediction")
	requireClass(t, provider.ClassNotFound, err)
	_, err = b.client.Download(t.Context(), got)
	requireClass(t, provider.ClassRejected, err)

	t.Run("after the end", func(t *testing.T) {
		b := setup(t, setupOpts{})
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		b.waitTerminal(t, job.ID)
		after, err := b.client.Cancel(t.Context(), job.ID)
		require.NoError(t, err)
		require.Equal(t, provider.StatusSucceeded, after.Status)
	})
}

func TestSimDownload(t *testing.T) {
	t.Parallel()

	t.Run("not finished", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute }})
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		_, err = b.client.Download(t.Context(), job)
		requireClass(t, provider.ClassOutputNotReady, err)
	})

	t.Run("not ready after success", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.OutputNotReady = time.Hour }})
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		done := b.waitTerminal(t, job.ID)
		_, err = b.client.Download(t.Context(), done)
		requireClass(t, provider.ClassOutputNotReady, err)
		require.Equal(t, 1, b.stats(t).Faults.OutputNotReady)
	})

	t.Run("expired by the provider", func(t *testing.T) {
		t.Parallel()
		// The client believes outputs live an hour; the simulator keeps
		// them 200ms, so the file itself answers 410.
		b := setup(t, setupOpts{
			sim:    func(o *providersim.Options) { o.OutputTTL = 200 * time.Millisecond },
			client: func(c *replicate.Config) { c.OutputRetention = time.Hour },
		})
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		done := b.waitTerminal(t, job.ID)
		time.Sleep(250 * time.Millisecond)
		_, err = b.client.Download(t.Context(), done)
		requireClass(t, provider.ClassOutputExpired, err)
		require.Equal(t, 1, b.stats(t).Faults.OutputExpired)

		removed, err := b.client.Get(t.Context(), job.ID)
		require.NoError(t, err)
		require.Empty(t, removed.OutputURL, "data_removed")
		_, err = b.client.Download(t.Context(), removed)
		requireClass(t, provider.ClassOutputExpired, err)
	})

	t.Run("expired by the clock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.OutputTTL = 150 * time.Millisecond }})
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		done := b.waitTerminal(t, job.ID)
		time.Sleep(time.Until(done.OutputExpiresAt))
		_, err = b.client.Download(t.Context(), done)
		requireClass(t, provider.ClassOutputExpired, err)
		require.Zero(t, b.stats(t).Faults.OutputExpired, "no request was needed")
	})

	t.Run("token only to trusted hosts", func(t *testing.T) {
		t.Parallel()
		auth := make(chan string, 2)
		files := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			auth <- r.Header.Get("Authorization")
			w.Header().Set("Content-Type", "video/mp4")
			_, _ = w.Write([]byte("....ftyp"))
		})
		api := httptest.NewServer(files)
		t.Cleanup(api.Close)
		elsewhere := httptest.NewServer(files)
		t.Cleanup(elsewhere.Close)
		c := newClient(t, func(c *replicate.Config) { c.BaseURL, c.APIToken = api.URL, "r8_token" })

		for _, host := range []string{api.URL, elsewhere.URL} {
			job := provider.Job{ID: "p1", Status: provider.StatusSucceeded, OutputURL: host + "/o.mp4"}
			data, _, err := download(t.Context(), c, job)
			require.NoError(t, err)
			require.Equal(t, "....ftyp", string(data))
		}
		require.Equal(t, "Bearer r8_token", <-auth)
		require.Empty(t, <-auth)
	})

	t.Run("errors never show the URL", func(t *testing.T) {
		t.Parallel()
		c := newClient(t, nil)
		job := provider.Job{ID: "p1", Status: provider.StatusSucceeded, OutputURL: "http://127.0.0.1:1/signed/sig=topsecret/o.mp4"}
		_, err := c.Download(t.Context(), job)
		requireClass(t, provider.ClassUnavailable, err)
		require.NotContains(t, err.Error(), "topsecret")
	})
}

// TestSimFaults maps each fault knob to the class the pipeline sees.
func TestSimFaults(t *testing.T) {
	t.Parallel()

	t.Run("429 with Retry-After", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.Rate429, o.RetryAfter = 1, 3*time.Second }})
		_, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		requireClass(t, provider.ClassRateLimited, err)
		require.Equal(t, 3*time.Second, provider.RetryAfterOf(err))
		_, err = b.client.Get(t.Context(), "p1")
		requireClass(t, provider.ClassRateLimited, err)
		st := b.stats(t)
		require.Equal(t, 2, st.Faults.RateLimited)
		require.Zero(t, st.JobsCreated)
	})

	t.Run("5xx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.Rate5xx = 1 }})
		_, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		requireClass(t, provider.ClassUnavailable, err)
		_, err = b.client.FindByClientRequestID(t.Context(), "x", time.Now())
		requireClass(t, provider.ClassUnavailable, err)
		require.Equal(t, 2, b.stats(t).Faults.ServerErrors)
	})

	for _, mode := range []string{providersim.DropClose, providersim.DropHang} {
		t.Run("accept then drop by "+mode, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{
				callbacks: true,
				sim:       func(o *providersim.Options) { o.RateDrop, o.DropMode = 1, mode },
				client:    func(c *replicate.Config) { c.Timeout = 300 * time.Millisecond },
			})
			req := submitRequest(t, b.callbackURL)
			since := time.Now()
			_, err := b.client.Submit(t.Context(), req)
			requireClass(t, provider.ClassTimeoutUnknown, err)
			if mode == providersim.DropHang {
				require.ErrorIs(t, err, context.DeadlineExceeded)
			}

			// The reconcile path: the job exists, and lookup finds it.
			found, err := b.client.FindByClientRequestID(t.Context(), req.ClientRequestID, since)
			require.NoError(t, err)
			require.Equal(t, req.ClientRequestID, found.ClientRequestID)

			// Found, so never sent again: one job.
			st := b.stats(t)
			require.Equal(t, 1, st.Faults.Dropped)
			require.Equal(t, map[string]int{req.IdempotencyKey: 1}, st.JobsByIdempotencyKey, "no duplicate generation")
			require.Equal(t, map[string]int{req.ClientRequestID: 1}, st.JobsByClientRequestID)
		})
	}

	t.Run("failed jobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.RateFail = 1 }})
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		done := b.waitTerminal(t, job.ID)
		require.Equal(t, provider.StatusFailed, done.Status)
		require.Equal(t, replicate.ErrorCodeFailed, done.ErrorCode)
		require.NotEmpty(t, done.ErrorMessage)
		require.Equal(t, 1, b.stats(t).Faults.FailedJobs)
	})

	t.Run("content policy at create and of the output", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{})
		req := submitRequest(t, "")
		req.Prompt = "a scene " + providersim.MarkerContentRejectedAtSubmit
		_, err := b.client.Submit(t.Context(), req)
		requireClass(t, provider.ClassContentRejected, err)

		req.Prompt = "a scene " + providersim.MarkerContentRejectedOutput
		req.IdempotencyKey += "-output"
		job, err := b.client.Submit(t.Context(), req)
		require.NoError(t, err)
		done := b.waitTerminal(t, job.ID)
		require.Equal(t, provider.StatusFailed, done.Status)
		require.True(t, done.ContentRejected)
		require.Equal(t, replicate.CodeSensitive, done.ErrorCode)
		st := b.stats(t)
		require.Equal(t, 1, st.Faults.ContentRejectedAtSubmit)
		require.Equal(t, 1, st.Faults.ContentFailedJobs)
		require.Equal(t, map[string]int{req.Prompt: 1}, st.JobsByPrompt)
	})

	t.Run("job duration", func(t *testing.T) {
		t.Parallel()
		const run = 400 * time.Millisecond
		b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = run, run }})
		start := time.Now()
		job, err := b.client.Submit(t.Context(), submitRequest(t, ""))
		require.NoError(t, err)
		require.Equal(t, provider.StatusQueued, job.Status)
		seen := map[provider.Status]bool{}
		require.Eventually(t, func() bool {
			j, err := b.client.Get(t.Context(), job.ID)
			require.NoError(t, err)
			seen[j.Status] = true
			return j.Status.Terminal()
		}, 10*time.Second, 20*time.Millisecond)
		require.GreaterOrEqual(t, time.Since(start), run)
		require.True(t, seen[provider.StatusRunning], "seen: %v", seen)
	})

	t.Run("seed makes faults repeatable", func(t *testing.T) {
		t.Parallel()
		sequence := func(seed int64) []provider.Class {
			b := setup(t, setupOpts{sim: func(o *providersim.Options) { o.Rate429, o.Seed = 0.5, seed }})
			var classes []provider.Class
			for range 24 {
				_, err := b.client.Get(t.Context(), "nosuchprediction")
				classes = append(classes, provider.ClassOf(err))
			}
			return classes
		}
		first := sequence(42)
		require.Equal(t, first, sequence(42))
		require.Contains(t, first, provider.ClassRateLimited)
		require.Contains(t, first, provider.ClassNotFound)
	})

	t.Run("wrong token", func(t *testing.T) {
		t.Parallel()
		b := setup(t, setupOpts{client: func(c *replicate.Config) { c.APIToken = "wrong" }})
		_, err := b.client.Get(t.Context(), "p1")
		requireClass(t, provider.ClassRejected, err)
	})
}
