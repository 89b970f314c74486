package providersim_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/provider/runway"
)

var runwayHeader = map[string]string{runway.VersionHeader: runway.DefaultAPIVersion}

func (b *testBundle) createTask(t *testing.T, prompt string) answer {
	t.Helper()
	return b.call(t, http.MethodPost, "/v1/text_to_video",
		map[string]any{"model": "gen4.5", "promptText": prompt, "ratio": "1280:720", "duration": 5}, runwayHeader)
}

func (b *testBundle) task(t *testing.T, id string) map[string]any {
	t.Helper()
	a := b.call(t, http.MethodGet, "/v1/tasks/"+id, nil, runwayHeader)
	require.Equal(t, http.StatusOK, a.status, "body: %s", a.body)
	return a.json(t)
}

func (b *testBundle) waitTask(t *testing.T, id, status string) map[string]any {
	t.Helper()
	var task map[string]any
	require.Eventually(t, func() bool {
		task = b.task(t, id)
		return task["status"] == status
	}, 10*time.Second, 5*time.Millisecond)
	return task
}

func TestRunwayTaskLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) {
		o.JobDurationMin, o.JobDurationMax = 300*time.Millisecond, 300*time.Millisecond
	})
	created := b.createTask(t, "a lighthouse in fog")
	require.Equal(t, http.StatusOK, created.status, "body: %s", created.body)
	id := created.json(t)["id"].(string)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)
	require.Len(t, created.json(t), 1, "Runway answers the id alone")

	require.Equal(t, "PENDING", b.task(t, id)["status"])
	running := b.waitTask(t, id, "RUNNING")
	require.GreaterOrEqual(t, running["progress"], 0.0)
	require.LessOrEqual(t, running["progress"], 1.0)
	done := b.waitTask(t, id, "SUCCEEDED")
	out := done["output"].([]any)
	require.Len(t, out, 1)
	require.Contains(t, out[0], "_jwt=")
	file := b.call(t, http.MethodGet, out[0].(string), nil, nil)
	require.Equal(t, http.StatusOK, file.status)
	require.Equal(t, "video/mp4", file.header.Get("Content-Type"))

	// A prediction endpoint does not know a Runway task.
	require.Equal(t, http.StatusNotFound, b.call(t, http.MethodGet, "/v1/predictions/"+id, nil, nil).status)

	st := b.sim.Stats()
	require.Equal(t, 1, st.JobsCreated)
	require.Equal(t, map[string]int{providersim.FormatRunway: 1}, st.JobsCreatedByFormat)
	require.Equal(t, map[string]int{"a lighthouse in fog": 1}, st.JobsByPrompt)
}

func TestRunwayRequiresVersionAndToken(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	body := map[string]any{"model": "gen4.5", "promptText": "p", "ratio": "1280:720", "duration": 5}
	noVersion := b.call(t, http.MethodPost, "/v1/text_to_video", body, nil)
	require.Equal(t, http.StatusBadRequest, noVersion.status)
	require.Contains(t, noVersion.json(t)["error"], runway.VersionHeader)
	badToken := b.call(t, http.MethodPost, "/v1/text_to_video", body, map[string]string{"Authorization": "Bearer nope", runway.VersionHeader: runway.DefaultAPIVersion})
	require.Equal(t, http.StatusUnauthorized, badToken.status)
	require.NotEmpty(t, badToken.json(t)["error"])
	badRatio := b.call(t, http.MethodPost, "/v1/text_to_video", map[string]any{"model": "gen4.5", "promptText": "p", "ratio": "16:9x"}, runwayHeader)
	require.Equal(t, http.StatusBadRequest, badRatio.status)
	require.Zero(t, b.sim.Stats().JobsCreated)
}

func TestRunwayThrottledPhase(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) {
		o.ThrottleAbove, o.ThrottleFor = 1, 400*time.Millisecond
		o.JobDurationMin, o.JobDurationMax = time.Second, time.Second
	})
	first := b.createTask(t, "first").json(t)["id"].(string)
	second := b.createTask(t, "second").json(t)["id"].(string)
	require.Equal(t, "PENDING", b.task(t, first)["status"], "under the limit a task is enqueued at once")
	require.Equal(t, "THROTTLED", b.task(t, second)["status"], "above it the task waits")
	b.waitTask(t, second, "PENDING")
	require.Equal(t, 1, b.sim.Stats().Faults.Throttled)
}

func TestRunwayDeleteCancelsOrDeletes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute })
	id := b.createTask(t, "long").json(t)["id"].(string)
	require.Equal(t, http.StatusNoContent, b.call(t, http.MethodDelete, "/v1/tasks/"+id, nil, runwayHeader).status)
	require.Equal(t, "CANCELLED", b.task(t, id)["status"])
	// Deleting a finished task removes it.
	require.Equal(t, http.StatusNoContent, b.call(t, http.MethodDelete, "/v1/tasks/"+id, nil, runwayHeader).status)
	require.Equal(t, http.StatusNotFound, b.call(t, http.MethodGet, "/v1/tasks/"+id, nil, runwayHeader).status)
	require.Equal(t, http.StatusNotFound, b.call(t, http.MethodDelete, "/v1/tasks/"+id, nil, runwayHeader).status)
}

func TestRunwayFaultKnobs(t *testing.T) {
	t.Parallel()
	t.Run("429 with Retry-After", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) { o.Rate429, o.RetryAfter = 1, 3*time.Second })
		a := b.createTask(t, "p")
		require.Equal(t, http.StatusTooManyRequests, a.status)
		require.Equal(t, "3", a.header.Get("Retry-After"))
		require.NotEmpty(t, a.json(t)["error"])
		require.Zero(t, b.sim.Stats().JobsCreated)
	})
	t.Run("503", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) { o.Rate5xx = 1 })
		require.Equal(t, http.StatusServiceUnavailable, b.createTask(t, "p").status)
		require.Equal(t, 1, b.sim.Stats().Faults.ServerErrors)
	})
	t.Run("failed jobs", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) { o.RateFail = 1 })
		done := b.waitTask(t, b.createTask(t, "p").json(t)["id"].(string), "FAILED")
		require.Equal(t, "INTERNAL", done["failureCode"])
		require.NotEmpty(t, done["failure"])
	})
	t.Run("output not ready, then expired as a signed URL", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) {
			o.OutputNotReady, o.OutputTTL = 300*time.Millisecond, 600*time.Millisecond
		})
		done := b.waitTask(t, b.createTask(t, "p").json(t)["id"].(string), "SUCCEEDED")
		url := done["output"].([]any)[0].(string)
		require.Equal(t, http.StatusNotFound, b.call(t, http.MethodGet, url, nil, nil).status)
		require.Eventually(t, func() bool { return b.call(t, http.MethodGet, url, nil, nil).status == http.StatusForbidden }, 5*time.Second, 20*time.Millisecond)
		exp := jwtExp(t, url)
		require.WithinDuration(t, time.Now(), exp, 2*time.Second, "the URL says when it expires")
	})
	t.Run("max jobs", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) {
			o.MaxJobs = 1
			o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute
		})
		require.Equal(t, http.StatusOK, b.createTask(t, "one").status)
		require.Equal(t, http.StatusTooManyRequests, b.createTask(t, "two").status)
		require.Equal(t, 1, b.sim.Stats().Faults.Capacity)
	})
	t.Run("job duration", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) {
			o.JobDurationMin, o.JobDurationMax = 400*time.Millisecond, 400*time.Millisecond
		})
		start := time.Now()
		b.waitTask(t, b.createTask(t, "p").json(t)["id"].(string), "SUCCEEDED")
		require.GreaterOrEqual(t, time.Since(start), 400*time.Millisecond)
	})
	t.Run("seed repeats the faults", func(t *testing.T) {
		statuses := func() []int {
			b := setup(t, func(o *providersim.Options) { o.Rate429, o.Seed = 0.5, 42 })
			var got []int
			for range 8 {
				got = append(got, b.createTask(t, "p").status)
			}
			return got
		}
		first := statuses()
		require.Equal(t, first, statuses())
		require.Contains(t, first, http.StatusTooManyRequests)
		require.Contains(t, first, http.StatusOK)
	})
}

func TestModerationInBothFormats(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	refused := b.createTask(t, "a scene "+providersim.MarkerContentRejectedAtSubmit)
	require.Equal(t, http.StatusBadRequest, refused.status)
	require.Equal(t, "SAFETY.INPUT.TEXT", refused.json(t)["failureCode"])

	failed := b.waitTask(t, b.createTask(t, "a scene "+providersim.MarkerContentRejectedOutput).json(t)["id"].(string), "FAILED")
	require.Equal(t, "SAFETY.OUTPUT.VIDEO", failed["failureCode"])

	pred := b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{"input": map[string]any{"prompt": "x " + providersim.MarkerContentRejectedAtSubmit}}, nil)
	require.Equal(t, http.StatusUnprocessableEntity, pred.status)
	require.Contains(t, pred.json(t)["detail"], "E005")
	p := b.waitStatus(t, b.create(t, map[string]any{"prompt": "x " + providersim.MarkerContentRejectedOutput}, nil)["id"].(string), "failed")
	require.Contains(t, p["error"], "(E005)")

	st := b.sim.Stats()
	require.Equal(t, 2, st.Faults.ContentRejectedAtSubmit)
	require.Equal(t, 2, st.Faults.ContentFailedJobs)
	require.Zero(t, st.Faults.FailedJobs, "content failures are counted apart")
	require.Equal(t, map[string]int{providersim.FormatRunway: 1, providersim.FormatReplicate: 1}, st.JobsCreatedByFormat)

	t.Run("rates", func(t *testing.T) {
		b := setup(t, func(o *providersim.Options) { o.RateContentRejectSubmit = 1 })
		require.Equal(t, http.StatusBadRequest, b.createTask(t, "p").status)
		b = setup(t, func(o *providersim.Options) { o.RateContentFail = 1 })
		require.Equal(t, "SAFETY.OUTPUT.VIDEO", b.waitTask(t, b.createTask(t, "p").json(t)["id"].(string), "FAILED")["failureCode"])
	})
}

func TestRunwayTasksSurviveRestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "jobs")
	edit := func(o *providersim.Options) {
		o.StateFile = path
		o.JobDurationMin, o.JobDurationMax = 500*time.Millisecond, 500*time.Millisecond
	}
	first := setup(t, edit)
	id := first.createTask(t, "kept across runs").json(t)["id"].(string)
	first.create(t, map[string]any{"prompt": "a prediction"}, nil)
	require.NoError(t, first.sim.Close())

	second := setup(t, edit)
	second.waitTask(t, id, "SUCCEEDED")
	st := second.sim.Stats()
	require.Equal(t, 2, st.JobsCreated)
	require.Equal(t, map[string]int{providersim.FormatRunway: 1, providersim.FormatReplicate: 1}, st.JobsCreatedByFormat)
	require.Equal(t, map[string]int{"kept across runs": 1, "a prediction": 1}, st.JobsByPrompt)
}

// jwtExp reads the exp claim of an output URL's _jwt.
func jwtExp(t *testing.T, url string) time.Time {
	t.Helper()
	_, tok, ok := strings.Cut(url, "_jwt=")
	require.True(t, ok)
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3)
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var claims struct{ Exp int64 }
	require.NoError(t, json.Unmarshal(raw, &claims))
	return time.Unix(claims.Exp, 0)
}
