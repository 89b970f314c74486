package media_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
)

func TestProxyH264(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name          string
		clip          mediatest.ClipParams
		width, height int
	}{
		{"1080p is scaled to 720p", mediatest.ClipParams{Duration: time.Second, Width: 1920, Height: 1080, Rate: 5}, 1280, 720},
		{"portrait fits 720x1280", mediatest.ClipParams{Duration: time.Second, Width: 1080, Height: 1920, Rate: 5}, 720, 1280},
		{"small is not upscaled", mediatest.ClipParams{Duration: time.Second, Width: 320, Height: 240}, 320, 240},
		{"odd dimensions become even", mediatest.ClipParams{Duration: time.Second, Width: 321, Height: 241, PixFmt: "yuv444p"}, 320, 240},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			clip := mediatest.Clip(t, tc.clip)
			out := filepath.Join(t.TempDir(), "proxy.mp4")

			require.NoError(t, b.tool.ProxyH264(testCtx(t), clip, out))

			p, err := b.tool.Probe(testCtx(t), out)
			require.NoError(t, err)
			require.Equal(t, "h264", p.Video.Codec)
			require.Equal(t, "yuv420p", p.Video.PixFmt)
			require.Equal(t, tc.width, p.Video.Width)
			require.Equal(t, tc.height, p.Video.Height)
			require.LessOrEqual(t, max(p.Video.Width, p.Video.Height), 1280)
			require.LessOrEqual(t, min(p.Video.Width, p.Video.Height), 720)
			require.Zero(t, p.Video.Width%2)
			require.Zero(t, p.Video.Height%2)
			require.NotNil(t, p.Audio, "audio kept")
			require.Equal(t, "aac", p.Audio.Codec)
			require.InDelta(t, 1.0, p.Duration.Seconds(), 0.15)
			requireFaststart(t, out)
			requireNoLeftovers(t, out)
		})
	}

	t.Run("video without audio", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoAudio: true})
		out := filepath.Join(t.TempDir(), "proxy.mp4")

		require.NoError(t, b.tool.ProxyH264(testCtx(t), clip, out))
		p, err := b.tool.Probe(testCtx(t), out)
		require.NoError(t, err)
		require.NotNil(t, p.Video)
		require.Nil(t, p.Audio)
	})

	t.Run("audio only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoVideo: true})
		out := filepath.Join(t.TempDir(), "proxy.mp4")

		require.ErrorIs(t, b.tool.ProxyH264(testCtx(t), clip, out), media.ErrNoVideo)
		requireNoLeftovers(t, out)
	})

	t.Run("failure leaves the previous output", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out := filepath.Join(t.TempDir(), "proxy.mp4")
		require.NoError(t, os.WriteFile(out, []byte("previous"), 0o600))

		err := b.tool.ProxyH264(testCtx(t), filepath.Join(t.TempDir(), "missing.mp4"), out)
		require.ErrorContains(t, err, "missing.mp4")
		got, err := os.ReadFile(out)
		require.NoError(t, err)
		require.Equal(t, "previous", string(got))
		requireNoLeftovers(t, out)
	})

	t.Run("output directory missing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second})
		err := b.tool.ProxyH264(testCtx(t), clip, filepath.Join(t.TempDir(), "no", "such", "proxy.mp4"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestThumbnail(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		clip mediatest.ClipParams
		at   time.Duration
		// width of the thumbnail
		width int
	}{
		{"middle", mediatest.ClipParams{Duration: 2 * time.Second}, time.Second, 320},
		{"past the end", mediatest.ClipParams{Duration: 2 * time.Second}, time.Hour, 320},
		{"exactly the end", mediatest.ClipParams{Duration: 2 * time.Second}, 2 * time.Second, 320},
		{"negative", mediatest.ClipParams{Duration: time.Second}, -time.Second, 320},
		{"wide video is scaled to 640", mediatest.ClipParams{Duration: time.Second, Width: 1280, Height: 720, Rate: 5}, 500 * time.Millisecond, 640},
		{"video only", mediatest.ClipParams{Duration: time.Second, NoAudio: true}, 500 * time.Millisecond, 320},
		{"after the video, before the audio ends", mediatest.ClipParams{Duration: time.Second, AudioDuration: 3 * time.Second}, 2500 * time.Millisecond, 320},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			clip := mediatest.Clip(t, tc.clip)
			out := filepath.Join(t.TempDir(), "thumb.jpg")

			require.NoError(t, b.tool.Thumbnail(testCtx(t), clip, out, tc.at))

			data, err := os.ReadFile(out)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(data, []byte{0xFF, 0xD8}), "JPEG magic bytes")
			p, err := b.tool.Probe(testCtx(t), out)
			require.NoError(t, err)
			require.Equal(t, "mjpeg", p.Video.Codec)
			require.LessOrEqual(t, p.Video.Width, 640)
			require.Equal(t, tc.width, p.Video.Width)
			requireNoLeftovers(t, out)
		})
	}

	t.Run("audio only", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoVideo: true})
		err := b.tool.Thumbnail(testCtx(t), clip, filepath.Join(t.TempDir(), "thumb.jpg"), 0)
		require.ErrorIs(t, err, media.ErrNoVideo)
	})
}

func TestWaveform(t *testing.T) {
	t.Parallel()

	for _, tc := range []struct {
		name string
		clip mediatest.ClipParams
	}{
		{"clip with audio", mediatest.ClipParams{Duration: time.Second}},
		{"audio only", mediatest.ClipParams{Duration: time.Second, NoVideo: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			clip := mediatest.Clip(t, tc.clip)
			out := filepath.Join(t.TempDir(), "wave.png")

			require.NoError(t, b.tool.Waveform(testCtx(t), clip, out))

			data, err := os.ReadFile(out)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")), "PNG magic bytes")
			p, err := b.tool.Probe(testCtx(t), out)
			require.NoError(t, err)
			require.Equal(t, "png", p.Video.Codec)
			require.Equal(t, 1280, p.Video.Width)
			require.Equal(t, 240, p.Video.Height)
			requireNoLeftovers(t, out)
		})
	}

	t.Run("no audio", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoAudio: true})
		out := filepath.Join(t.TempDir(), "wave.png")

		err := b.tool.Waveform(testCtx(t), clip, out)
		require.ErrorIs(t, err, media.ErrNoAudio)
		requireNoLeftovers(t, out)
	})
}

func TestDeriveDeadline(t *testing.T) {
	t.Parallel()

	t.Run("canceled before the call", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second})
		out := filepath.Join(t.TempDir(), "proxy.mp4")
		ctx, cancel := context.WithCancel(t.Context())
		cancel()

		start := time.Now()
		require.ErrorIs(t, b.tool.ProxyH264(ctx, clip, out), context.Canceled)
		require.ErrorIs(t, b.tool.Thumbnail(ctx, clip, out, 0), context.Canceled)
		require.ErrorIs(t, b.tool.Waveform(ctx, clip, out), context.Canceled)
		require.Less(t, time.Since(start), time.Second)
		requireNoLeftovers(t, out)
	})

	t.Run("deadline while ffmpeg runs", func(t *testing.T) {
		t.Parallel()
		clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, Width: 160, Height: 120})
		// An "ffmpeg" that never finishes stands in for a stalled read or a
		// slow encode: only the deadline ends it.
		tool := media.New(config.Media{FFmpegPath: stuckFFmpeg, FFprobePath: mediatest.FFprobe(t)})
		out := filepath.Join(t.TempDir(), "proxy.mp4")

		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		start := time.Now()
		err := tool.ProxyH264(ctx, clip, out)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "ffmpeg interrupted")
		require.Less(t, time.Since(start), 6*time.Second)
		requireNoLeftovers(t, out)
	})
}

// requireFaststart checks that the MP4 index (moov) precedes the media data.
func requireFaststart(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	moov, mdat := bytes.Index(data, []byte("moov")), bytes.Index(data, []byte("mdat"))
	require.Positive(t, moov)
	require.Positive(t, mdat)
	require.Less(t, moov, mdat, "moov before mdat")
}

// requireNoLeftovers checks that no temporary file stayed beside output.
func requireNoLeftovers(t *testing.T, output string) {
	t.Helper()
	partial, err := filepath.Glob(filepath.Join(filepath.Dir(output), ".*.partial"))
	require.NoError(t, err)
	require.Empty(t, partial)
}
