package media_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
)

type testBundle struct {
	tool *media.Tool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{tool: media.New(config.Media{
		FFmpegPath:  mediatest.FFmpeg(t),
		FFprobePath: mediatest.FFprobe(t),
	})}
}

// testCtx bounds one test's tool calls; the tests keep clips tiny.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestProbe(t *testing.T) {
	t.Parallel()

	t.Run("clip with audio", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: 2 * time.Second, Width: 320, Height: 240, Rate: 25})

		p, err := b.tool.Probe(testCtx(t), clip)
		require.NoError(t, err)
		require.InDelta(t, 2.0, p.Duration.Seconds(), 0.1)
		require.Contains(t, p.FormatName, "mp4")
		info, err := os.Stat(clip)
		require.NoError(t, err)
		require.Equal(t, info.Size(), p.SizeBytes)
		require.Positive(t, p.BitRate)
		require.Equal(t, &media.VideoStream{Codec: "h264", Width: 320, Height: 240, FrameRate: 25, PixFmt: "yuv420p"}, p.Video)
		require.Equal(t, &media.AudioStream{Codec: "aac", SampleRate: 44100, Channels: 1}, p.Audio)
	})

	t.Run("video only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoAudio: true})

		p, err := b.tool.Probe(testCtx(t), clip)
		require.NoError(t, err)
		require.NotNil(t, p.Video)
		require.Nil(t, p.Audio)
	})

	t.Run("audio only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoVideo: true})

		p, err := b.tool.Probe(testCtx(t), clip)
		require.NoError(t, err)
		require.Nil(t, p.Video)
		require.Equal(t, &media.AudioStream{Codec: "aac", SampleRate: 44100, Channels: 1}, p.Audio)
	})

	t.Run("missing file", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		missing := filepath.Join(t.TempDir(), "missing.mp4")

		_, err := b.tool.Probe(testCtx(t), missing)
		require.ErrorContains(t, err, missing)
		require.ErrorContains(t, err, "No such file or directory")
		var exitErr *media.ExitError
		require.ErrorAs(t, err, &exitErr)
		require.Equal(t, "ffprobe", exitErr.Tool)
		require.Equal(t, 1, exitErr.ExitCode)
	})

	t.Run("text file", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		text := filepath.Join(t.TempDir(), "notes.txt")
		require.NoError(t, os.WriteFile(text, []byte("not a video, just some words\n"), 0o600))

		_, err := b.tool.Probe(testCtx(t), text)
		require.ErrorContains(t, err, text)
		require.ErrorContains(t, err, "Invalid data found")
	})

	t.Run("unsupported inputs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, input := range []string{"", "s3://bucket/key.mp4", "ftp://host/a.mp4", "http:///no-host.mp4"} {
			_, err := b.tool.Probe(testCtx(t), input)
			require.ErrorIs(t, err, media.ErrUnsupportedInput, "input %q", input)
		}
	})

	t.Run("missing binary", func(t *testing.T) {
		t.Parallel()
		tool := media.New(config.Media{FFprobePath: filepath.Join(t.TempDir(), "no-ffprobe")})
		_, err := tool.Probe(testCtx(t), "clip.mp4")
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestProbeURL(t *testing.T) {
	t.Parallel()

	const signature = "X-Amz-Signature=5ec7e75ec7e7"

	t.Run("presigned URL", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.RawQuery != signature {
				http.Error(w, "signature mismatch", http.StatusForbidden)
				return
			}
			http.ServeFile(w, r, clip)
		}))
		t.Cleanup(srv.Close)

		p, err := b.tool.Probe(testCtx(t), srv.URL+"/tenant/asset.mp4?"+signature)
		require.NoError(t, err)
		require.Equal(t, 320, p.Video.Width)
		require.NotNil(t, p.Audio)

		// A refused URL names host and path but never the signature.
		_, err = b.tool.Probe(testCtx(t), srv.URL+"/tenant/asset.mp4?"+signature+"-expired")
		require.Error(t, err)
		require.ErrorContains(t, err, srv.URL+"/tenant/asset.mp4")
		require.ErrorContains(t, err, "403")
		require.NotContains(t, err.Error(), "5ec7e75ec7e7")
	})

	t.Run("deadline on a server that never answers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(release) })

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := b.tool.Probe(ctx, srv.URL+"/slow.mp4?"+signature)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 5*time.Second)
		require.NotContains(t, err.Error(), "5ec7e75ec7e7")
	})
}

func TestProbeCanceled(t *testing.T) {
	t.Parallel()
	b := setup(t)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	start := time.Now()
	_, err := b.tool.Probe(ctx, "clip.mp4")
	require.ErrorIs(t, err, context.Canceled)
	require.Less(t, time.Since(start), time.Second)

	cause := errors.New("stage shutting down")
	ctx, cancelCause := context.WithCancelCause(t.Context())
	cancelCause(cause)
	_, err = b.tool.Probe(ctx, "clip.mp4")
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, cause)
}
