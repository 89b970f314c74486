package providersim_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
)

// TestOutput: the output is a real MP4, H.264 with an AAC track, at the
// requested aspect ratio scaled down, 1–2 seconds long, made once.
func TestOutput(t *testing.T) {
	t.Parallel()
	ffprobe, err := exec.LookPath("ffprobe")
	require.NoError(t, err)
	cache := t.TempDir()
	b := setup(t, func(o *providersim.Options) { o.CacheDir = cache })

	cases := []struct {
		input         map[string]any
		width, height int
		seconds       float64
	}{
		{input: map[string]any{"resolution": "1280x720", "duration": 5}, width: 320, height: 180, seconds: 2},
		{input: map[string]any{"resolution": "720x1280", "duration": 1}, width: 180, height: 320, seconds: 1},
		{input: map[string]any{"resolution": "480p"}, width: 320, height: 180, seconds: 1},
	}
	for _, tc := range cases {
		id := b.create(t, tc.input, nil)["id"].(string)
		b.waitStatus(t, id, "succeeded")
		a := b.call(t, http.MethodGet, "/files/"+id+"/output.mp4", nil, nil)
		require.Equal(t, http.StatusOK, a.status)
		require.Equal(t, "video/mp4", a.header.Get("Content-Type"))
		path := filepath.Join(t.TempDir(), "out.mp4")
		require.NoError(t, os.WriteFile(path, a.body, 0o600))

		out, err := exec.CommandContext(t.Context(), ffprobe, "-v", "error",
			"-show_entries", "stream=codec_type,codec_name,width,height:format=duration", "-of", "json", path).Output()
		require.NoError(t, err)
		var probe struct {
			Streams []struct {
				CodecType string `json:"codec_type"`
				CodecName string `json:"codec_name"`
				Width     int    `json:"width"`
				Height    int    `json:"height"`
			} `json:"streams"`
			Format struct {
				Duration string `json:"duration"`
			} `json:"format"`
		}
		require.NoError(t, json.Unmarshal(out, &probe))
		require.Len(t, probe.Streams, 2)
		require.Equal(t, "h264", probe.Streams[0].CodecName)
		require.Equal(t, tc.width, probe.Streams[0].Width, tc.input)
		require.Equal(t, tc.height, probe.Streams[0].Height, tc.input)
		require.Equal(t, "aac", probe.Streams[1].CodecName)
		d, err := strconv.ParseFloat(probe.Format.Duration, 64)
		require.NoError(t, err)
		require.InDelta(t, tc.seconds, d, 0.1)
	}

	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	require.Len(t, entries, 3, "one file per distinct clip, nothing half-written")

	// Range requests work, so a resumed download does.
	id := b.create(t, cases[0].input, nil)["id"].(string)
	b.waitStatus(t, id, "succeeded")
	a := b.call(t, http.MethodGet, "/files/"+id+"/output.mp4", nil, map[string]string{"Range": "bytes=4-7"})
	require.Equal(t, http.StatusPartialContent, a.status)
	require.Equal(t, "ftyp", string(a.body))
}

// TestConcurrentOutputs: many downloads of a new clip at once share one
// ffmpeg run and all get the same bytes.
func TestConcurrentOutputs(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *providersim.Options) { o.CacheDir = t.TempDir() })
	var ids []string
	for range 6 {
		ids = append(ids, b.create(t, map[string]any{"resolution": "640x480"}, nil)["id"].(string))
	}
	for _, id := range ids {
		b.waitStatus(t, id, "succeeded")
	}
	bodies := make(chan []byte, len(ids))
	for _, id := range ids {
		go func() {
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			resp, err := c.Get(b.base + "/files/" + id + "/output.mp4")
			if err != nil {
				bodies <- nil
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			bodies <- body
		}()
	}
	first := <-bodies
	require.NotEmpty(t, first)
	for range len(ids) - 1 {
		require.Equal(t, first, <-bodies)
	}
}

// TestWebhooks: a signed completion webhook, verified here independently
// of the client, and bounded retries against a receiver that never takes
// it.
func TestWebhooks(t *testing.T) {
	t.Parallel()
	type got struct {
		header http.Header
		body   []byte
	}
	received := make(chan got, 8)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		received <- got{header: r.Header.Clone(), body: body}
		if strings.Contains(r.URL.RawQuery, "fail") {
			w.WriteHeader(http.StatusInternalServerError)
		}
	}))
	t.Cleanup(receiver.Close)
	b := setup(t, func(o *providersim.Options) { o.WebhookAttempts = 3 })

	id := b.create(t, map[string]any{}, nil)["id"].(string)
	a := b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{
		"input": map[string]any{}, "webhook": receiver.URL + "/cb?aivedio_client_request_id=req-9",
	}, nil)
	require.Equal(t, http.StatusCreated, a.status)
	hooked := a.json(t)["id"].(string)

	var g got
	select {
	case g = <-received:
	case <-time.After(10 * time.Second):
		t.Fatal("no webhook")
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(b.sim.WebhookSecret(), "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(g.header.Get("webhook-id") + "." + g.header.Get("webhook-timestamp") + "." + string(g.body)))
	require.Equal(t, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)), g.header.Get("webhook-signature"))
	ts, err := strconv.ParseInt(g.header.Get("webhook-timestamp"), 10, 64)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), time.Unix(ts, 0), 5*time.Second)
	var p map[string]any
	require.NoError(t, json.Unmarshal(g.body, &p))
	require.Equal(t, hooked, p["id"])
	require.Equal(t, "succeeded", p["status"])
	require.Equal(t, 1, b.sim.Stats().JobsByClientRequestID["req-9"])
	_ = id // a job without a webhook sends nothing

	a = b.call(t, http.MethodPost, "/v1/models/acme/video/predictions", map[string]any{
		"input": map[string]any{}, "webhook": receiver.URL + "/cb?fail=1",
	}, nil)
	require.Equal(t, http.StatusCreated, a.status)
	require.Eventually(t, func() bool { return b.sim.Stats().Webhooks.Failed == 1 }, 10*time.Second, 10*time.Millisecond)
	st := b.sim.Stats()
	require.Equal(t, 1, st.Webhooks.Delivered)
	require.Equal(t, 2, st.Webhooks.Retried)
	require.Len(t, received, 3, "three attempts at the failing receiver, none for the job without a webhook")
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	select {
	case <-received:
	case <-ctx.Done():
	}
}
