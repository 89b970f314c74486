package providersim_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
)

func TestWireFormat(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) { o.HonorIdempotencyKey = true })
	hook := "https://api.example/cb?aivedio_client_request_id=req-1"
	a := b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{
		"input":                 map[string]any{"prompt": "p", "duration": 2, "resolution": "1280x720"},
		"webhook":               hook,
		"webhook_events_filter": []string{"completed"},
	}, map[string]string{"Idempotency-Key": "k1"})
	require.Equal(t, http.StatusCreated, a.status)
	require.Equal(t, "application/json", a.header.Get("Content-Type"))
	p := a.json(t)
	id := p["id"].(string)
	require.Regexp(t, `^[a-z2-7]{26}$`, id)
	require.Equal(t, "starting", p["status"])
	require.Equal(t, "acme/video", p["model"])
	require.Equal(t, "api", p["source"])
	require.Equal(t, hook, p["webhook"])
	require.Equal(t, map[string]any{"prompt": "p", "duration": float64(2), "resolution": "1280x720"}, p["input"])
	require.Nil(t, p["output"])
	require.Nil(t, p["completed_at"])
	require.Equal(t, false, p["data_removed"])
	require.Equal(t, map[string]any{"get": b.base + "/v1/predictions/" + id, "cancel": b.base + "/v1/predictions/" + id + "/cancel"}, p["urls"])
	_, err := time.Parse(time.RFC3339Nano, p["created_at"].(string))
	require.NoError(t, err)

	done := b.waitStatus(t, id, "succeeded")
	require.Equal(t, b.base+"/files/"+id+"/output.mp4", done["output"])
	require.NotNil(t, done["completed_at"])
	require.Contains(t, done["logs"], "100%|")
	require.Contains(t, done["metrics"], "predict_time")

	t.Run("version route", func(t *testing.T) {
		const v = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa"
		for _, version := range []string{v, "acme/video:" + v} {
			a := b.call(t, http.MethodPost, "/v1/predictions", map[string]any{"version": version, "input": map[string]any{}}, nil)
			require.Equal(t, http.StatusCreated, a.status)
			require.Equal(t, v, a.json(t)["version"])
		}
	})

	t.Run("refusals", func(t *testing.T) {
		cases := []struct {
			name, path string
			body       any
			header     map[string]string
			status     int
		}{
			{name: "no version", path: "/v1/predictions", body: map[string]any{"input": map[string]any{}}, status: 422},
			{name: "no input", path: "/v1/models/a/b/predictions", body: map[string]any{}, status: 422},
			{name: "input not an object", path: "/v1/models/a/b/predictions", body: map[string]any{"input": "x"}, status: 422},
			{name: "bad webhook", path: "/v1/models/a/b/predictions", body: map[string]any{"input": map[string]any{}, "webhook": "not a url"}, status: 422},
			{name: "bad event", path: "/v1/models/a/b/predictions", body: map[string]any{"input": map[string]any{}, "webhook_events_filter": []string{"done"}}, status: 422},
			{name: "not JSON", path: "/v1/models/a/b/predictions", body: "x", status: 400},
			{name: "key reused for another request", path: "/v1/models/acme/video/predictions", body: map[string]any{"input": map[string]any{"prompt": "other"}}, header: map[string]string{"Idempotency-Key": "k1"}, status: 422},
			{name: "no token", path: "/v1/models/a/b/predictions", body: map[string]any{"input": map[string]any{}}, header: map[string]string{"Authorization": ""}, status: 401},
		}
		for _, tc := range cases {
			a := b.call(t, http.MethodPost, tc.path, tc.body, tc.header)
			require.Equal(t, tc.status, a.status, "%s: %s", tc.name, a.body)
			require.NotEmpty(t, a.json(t)["detail"], tc.name)
		}
		require.Equal(t, http.StatusNotFound, b.call(t, http.MethodGet, "/v1/predictions/nosuch", nil, nil).status)
		require.Equal(t, http.StatusNotFound, b.call(t, http.MethodPost, "/v1/predictions/nosuch/cancel", nil, nil).status)
	})

	t.Run("idempotent replay", func(t *testing.T) {
		a := b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{
			"input":                 map[string]any{"prompt": "p", "duration": 2, "resolution": "1280x720"},
			"webhook":               hook,
			"webhook_events_filter": []string{"completed"},
		}, map[string]string{"Idempotency-Key": "k1"})
		require.Equal(t, http.StatusCreated, a.status)
		require.Equal(t, "true", a.header.Get("Idempotent-Replayed"))
		require.Equal(t, id, a.json(t)["id"])
		st := b.sim.Stats()
		require.Equal(t, 1, st.JobsByIdempotencyKey["k1"])
		require.Equal(t, 1, st.JobsByClientRequestID["req-1"])
	})

	t.Run("as Replicate, a repeated key is a new job", func(t *testing.T) {
		plain := setup(t, nil)
		req := map[string]any{"input": map[string]any{"prompt": "p"}, "webhook": hook}
		first := plain.call(t, http.MethodPost, "/v1/models/acme/video/predictions", req, map[string]string{"Idempotency-Key": "k1"})
		again := plain.call(t, http.MethodPost, "/v1/models/acme/video/predictions", req, map[string]string{"Idempotency-Key": "k1"})
		require.Equal(t, http.StatusCreated, again.status)
		require.Empty(t, again.header.Get("Idempotent-Replayed"))
		require.NotEqual(t, first.json(t)["id"], again.json(t)["id"])
		st := plain.sim.Stats()
		require.Equal(t, 2, st.JobsByIdempotencyKey["k1"], "the resend is counted against its key")
		require.Equal(t, 2, st.JobsByClientRequestID["req-1"])
		require.Zero(t, st.IdempotentReplays)
	})

	t.Run("webhook secret", func(t *testing.T) {
		a := b.call(t, http.MethodGet, "/v1/webhooks/default/secret", nil, nil)
		require.Equal(t, http.StatusOK, a.status)
		require.Equal(t, b.sim.WebhookSecret(), a.json(t)["key"])
		require.True(t, strings.HasPrefix(b.sim.WebhookSecret(), "whsec_"))
	})
}

func TestList(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) { o.PageSize = 2 })
	var ids []string
	for range 3 {
		ids = append(ids, b.create(t, map[string]any{}, nil)["id"].(string))
	}
	mid := b.call(t, http.MethodGet, "/v1/predictions/"+ids[1], nil, nil).json(t)["created_at"].(string)

	var listed []string
	next := "/v1/predictions"
	for next != "" {
		page := b.call(t, http.MethodGet, next, nil, nil).json(t)
		require.Contains(t, page, "previous")
		for _, r := range page["results"].([]any) {
			listed = append(listed, r.(map[string]any)["id"].(string))
		}
		next, _ = page["next"].(string)
		if next != "" {
			require.True(t, strings.HasPrefix(next, b.base+"/v1/predictions?"), next)
		}
	}
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, listed, "newest first, every page")

	page := b.call(t, http.MethodGet, "/v1/predictions?created_after="+url.QueryEscape(mid), nil, nil).json(t)
	require.Len(t, page["results"], 2)
	require.Nil(t, page["next"])
	require.Equal(t, http.StatusBadRequest, b.call(t, http.MethodGet, "/v1/predictions?created_after=yesterday", nil, nil).status)
	require.Equal(t, http.StatusBadRequest, b.call(t, http.MethodGet, "/v1/predictions?cursor=%21%21", nil, nil).status)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) { o.JobDurationMin, o.JobDurationMax = time.Minute, time.Minute })
	id := b.create(t, map[string]any{}, nil)["id"].(string)
	a := b.call(t, http.MethodPost, "/v1/predictions/"+id+"/cancel", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	p := a.json(t)
	require.Equal(t, "canceled", p["status"])
	require.NotNil(t, p["completed_at"])
	require.Equal(t, http.StatusNotFound, b.call(t, http.MethodGet, "/files/"+id+"/output.mp4", nil, nil).status)
}

// TestCapacity: the job store is bounded; finished jobs make room, running
// ones cannot.
func TestCapacity(t *testing.T) {
	t.Parallel()
	// Jobs of 3 s: the third create comes while both run, however slow
	// the machine, and the first still ends well within waitStatus.
	b := setup(t, func(o *providersim.Options) {
		o.MaxJobs, o.JobDurationMin, o.JobDurationMax = 2, 3*time.Second, 3*time.Second
	})
	first := b.create(t, map[string]any{}, map[string]string{"Idempotency-Key": "a"})["id"].(string)
	b.create(t, map[string]any{}, map[string]string{"Idempotency-Key": "b"})
	a := b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{"input": map[string]any{}}, nil)
	require.Equal(t, http.StatusTooManyRequests, a.status)
	require.Equal(t, "1", a.header.Get("Retry-After"))
	require.Equal(t, 1, b.sim.Stats().Faults.Capacity)

	b.waitStatus(t, first, "succeeded")
	b.create(t, map[string]any{}, nil)
	require.Equal(t, http.StatusNotFound, b.call(t, http.MethodGet, "/v1/predictions/"+first, nil, nil).status, "the oldest finished job made room")
}

func TestLifecycle(t *testing.T) {
	t.Parallel()

	t.Run("close before start, twice", func(t *testing.T) {
		t.Parallel()
		sim, err := providersim.New(providersim.DefaultOptions(), nil)
		require.NoError(t, err)
		require.NoError(t, sim.Close())
		require.NoError(t, sim.Close())
	})

	t.Run("start twice", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := b.sim.Start(t.Context(), "127.0.0.1:0")
		require.Error(t, err)
	})

	t.Run("close ends a hanging drop and pending webhooks", func(t *testing.T) {
		t.Parallel()
		sim, err := providersim.New(func() providersim.Options {
			o := providersim.DefaultOptions()
			o.RateDrop, o.DropMode = 1, providersim.DropHang
			o.JobDurationMin, o.JobDurationMax = 0, 0
			o.WebhookBackoff = time.Hour
			return o
		}(), nil)
		require.NoError(t, err)
		base, err := sim.Start(t.Context(), "127.0.0.1:0")
		require.NoError(t, err)

		errs := make(chan error, 1)
		go func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Post(base+"/v1/models/a/b/predictions", "application/json",
				strings.NewReader(`{"input":{},"webhook":"http://127.0.0.1:1/unreachable"}`))
			if err == nil {
				resp.Body.Close()
			}
			errs <- err
		}()
		require.Eventually(t, func() bool { return sim.Stats().Faults.Dropped == 1 }, 5*time.Second, 5*time.Millisecond)
		require.Eventually(t, func() bool { return sim.Stats().Webhooks.Retried == 1 }, 5*time.Second, 5*time.Millisecond)

		start := time.Now()
		require.NoError(t, sim.Close())
		require.Less(t, time.Since(start), 5*time.Second)
		require.Error(t, <-errs, "the hanging request ends unanswered")
	})

	t.Run("ctx ends it too", func(t *testing.T) {
		t.Parallel()
		sim, err := providersim.New(providersim.DefaultOptions(), nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(t.Context())
		base, err := sim.Start(ctx, "127.0.0.1:0")
		require.NoError(t, err)
		cancel()
		require.NoError(t, sim.Close())
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		_, err = c.Get(base + "/sim/stats")
		require.Error(t, err)
	})
}
