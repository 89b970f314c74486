// Package mediatest makes small real media files for tests, with the ffmpeg
// that servicetest locates (FFMPEG_PATH): a missing ffmpeg fails the test
// under `make test` and skips it elsewhere.
package mediatest

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aivedio/pipeline/shared/servicetest"
)

// ClipParams describes a test clip. Zero fields take the defaults: 2 s,
// 320x240, 25 frames per second, yuv420p, a 440 Hz mono tone.
type ClipParams struct {
	Duration      time.Duration
	AudioDuration time.Duration // default Duration; longer makes the video end first
	Width         int
	Height        int
	Rate          int    // frames per second
	PixFmt        string // default yuv420p; odd sizes need e.g. yuv444p
	NoAudio       bool   // a video-only clip
	NoVideo       bool   // an audio-only clip (an .m4a)
	Color         string // a still frame of this color instead of the moving test pattern
}

// FFmpeg returns the path of ffmpeg, or fails or skips tb as servicetest does.
func FFmpeg(tb testing.TB) string {
	tb.Helper()
	return servicetest.Env(tb, "ffmpeg", "FFMPEG_PATH")
}

// FFprobe returns the path of ffprobe, or fails or skips tb as servicetest does.
func FFprobe(tb testing.TB) string {
	tb.Helper()
	return servicetest.Env(tb, "ffprobe", "FFPROBE_PATH")
}

// Clip makes an H.264/AAC MP4 from ffmpeg's test pattern and sine sources
// under tb.TempDir() and returns its path. Keep clips short and small: the
// encode runs on the test's machine.
func Clip(tb testing.TB, p ClipParams) string {
	tb.Helper()
	ffmpeg := FFmpeg(tb)
	if p.NoAudio && p.NoVideo {
		tb.Fatal("mediatest.Clip: NoAudio and NoVideo leave nothing to encode")
	}
	if p.Duration <= 0 {
		p.Duration = 2 * time.Second
	}
	if p.AudioDuration <= 0 {
		p.AudioDuration = p.Duration
	}
	if p.Width <= 0 {
		p.Width = 320
	}
	if p.Height <= 0 {
		p.Height = 240
	}
	if p.Rate <= 0 {
		p.Rate = 25
	}
	if p.PixFmt == "" {
		p.PixFmt = "yuv420p"
	}
	seconds := strconv.FormatFloat(p.Duration.Seconds(), 'f', 3, 64)
	audioSeconds := strconv.FormatFloat(p.AudioDuration.Seconds(), 'f', 3, 64)
	name := "clip.mp4"
	args := []string{"-nostdin", "-hide_banner", "-v", "error"}
	if !p.NoVideo {
		source := fmt.Sprintf("testsrc=size=%dx%d:rate=%d:duration=%s", p.Width, p.Height, p.Rate, seconds)
		if p.Color != "" {
			source = fmt.Sprintf("color=c=%s:size=%dx%d:rate=%d:duration=%s", p.Color, p.Width, p.Height, p.Rate, seconds)
		}
		args = append(args, "-f", "lavfi", "-i", source)
	}
	if !p.NoAudio {
		args = append(args, "-f", "lavfi", "-i", "sine=frequency=440:duration="+audioSeconds)
	}
	if !p.NoVideo {
		args = append(args, "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", p.PixFmt)
	}
	if !p.NoAudio {
		args = append(args, "-c:a", "aac")
	}
	if p.NoVideo {
		name = "clip.m4a"
	}
	out := filepath.Join(tb.TempDir(), name)
	args = append(args, "-y", out)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if b, err := exec.CommandContext(ctx, ffmpeg, args...).CombinedOutput(); err != nil {
		tb.Fatalf("mediatest.Clip: ffmpeg %v: %v\n%s", args, err, b)
	}
	return out
}
