package media

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Filter graphs of the derivatives. Quotes keep the commas inside the
// expressions from splitting the graph.
const (
	// At most 1280x720 landscape or 720x1280 portrait, never upscaled, even
	// dimensions (x264 with yuv420p needs them), aspect ratio kept.
	proxyFilter = "scale=w='if(gt(iw,ih),min(1280,iw),min(720,iw))':h='if(gt(iw,ih),min(720,ih),min(1280,ih))'" +
		":force_original_aspect_ratio=decrease:force_divisible_by=2,format=yuv420p"
	// Square pixels first (a JPEG has no aspect ratio field), then at most
	// 640 wide with an even height.
	thumbnailFilter = "scale='trunc(iw*sar/2)*2':ih,setsar=1,scale='min(640,iw)':-2"
	waveformFilter  = "[0:a:0]aformat=channel_layouts=mono,showwavespic=s=1280x240:colors=0x2563eb[wave]"
)

var errEmptyOutput = errors.New("ffmpeg wrote nothing")

// ProxyH264 writes to output an H.264 MP4 (libx264, preset veryfast, CRF 28)
// of input's first video stream, scaled down to fit 1280x720 (720x1280 for
// portrait video) and never up, with even dimensions, the first audio
// stream as AAC if there is one, and the index at the front (+faststart) so
// that playback can start before the download ends.
//
// Like every derivative it reads input (a local path or an http(s) URL),
// runs outside any database transaction under ctx's deadline
// ([DefaultDeriveTimeout] when ctx has none) and its work's (see derive),
// and leaves output either
// complete or untouched: ffmpeg writes to a temporary file in output's
// directory that is renamed over output only on success, so a redelivered
// job can simply run again. An input without video is [ErrNoVideo].
func (t *Tool) ProxyH264(ctx context.Context, input, output string) error {
	ctx, cancel := withDefaultDeadline(ctx, DefaultDeriveTimeout)
	defer cancel()
	src, p, err := t.probeFor(ctx, input, OpProxy)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	if p.Video == nil {
		return fmt.Errorf("proxy %s: %w", src.display, ErrNoVideo)
	}
	args := []string{"-map", "0:V:0", "-vf", proxyFilter, "-c:v", "libx264", "-preset", "veryfast", "-crf", "28"}
	if p.Audio != nil {
		args = append(args, "-map", "0:a:0", "-c:a", "aac", "-b:a", "128k")
	}
	args = append(args, "-movflags", "+faststart", "-f", "mp4")
	if err := t.derive(ctx, OpProxy, src, output, nil, args, p.Duration); err != nil {
		return fmt.Errorf("proxy %s: %w", src.display, err)
	}
	return nil
}

// Thumbnail writes to output one JPEG frame of input's video taken at at,
// at most 640 pixels wide with square pixels. at is clamped into the video:
// below zero means the start, past the end means the last frames, so any
// at yields a frame. An input without video is [ErrNoVideo]. See
// [Tool.ProxyH264] for deadlines and how output is written.
func (t *Tool) Thumbnail(ctx context.Context, input, output string, at time.Duration) error {
	ctx, cancel := withDefaultDeadline(ctx, DefaultDeriveTimeout)
	defer cancel()
	src, p, err := t.probeFor(ctx, input, OpThumbnail)
	if err != nil {
		return fmt.Errorf("thumbnail: %w", err)
	}
	if p.Video == nil {
		return fmt.Errorf("thumbnail %s: %w", src.display, ErrNoVideo)
	}
	at = clampFrameTime(at, p)
	args := []string{"-map", "0:V:0", "-frames:v", "1", "-vf", thumbnailFilter,
		"-c:v", "mjpeg", "-q:v", "3", "-f", "image2", "-update", "1"}
	err = t.derive(ctx, OpThumbnail, src, output, seek(at), args, 0)
	if errors.Is(err, errEmptyOutput) && at > 0 {
		// The container's duration outlasts the video (a longer audio
		// track): no frame after at. The first frame is better than none.
		err = t.derive(ctx, OpThumbnail, src, output, nil, args, 0)
	}
	if err != nil {
		return fmt.Errorf("thumbnail %s at %s: %w", src.display, at, err)
	}
	return nil
}

// Waveform writes to output a 1280x240 PNG picture of input's first audio
// stream, mixed down to one channel, on a transparent background. An input
// without audio is [ErrNoAudio]. See [Tool.ProxyH264] for deadlines and how
// output is written.
func (t *Tool) Waveform(ctx context.Context, input, output string) error {
	ctx, cancel := withDefaultDeadline(ctx, DefaultDeriveTimeout)
	defer cancel()
	src, p, err := t.probeFor(ctx, input, OpWaveform)
	if err != nil {
		return fmt.Errorf("waveform: %w", err)
	}
	if p.Audio == nil {
		return fmt.Errorf("waveform %s: %w", src.display, ErrNoAudio)
	}
	args := []string{"-filter_complex", waveformFilter, "-map", "[wave]",
		"-frames:v", "1", "-c:v", "png", "-f", "image2", "-update", "1"}
	if err := t.derive(ctx, OpWaveform, src, output, nil, args, p.Duration); err != nil {
		return fmt.Errorf("waveform %s: %w", src.display, err)
	}
	return nil
}

// probeFor checks input and probes it for operation op: the derivatives
// need to know which streams exist before they ask ffmpeg for them.
func (t *Tool) probeFor(ctx context.Context, input, op string) (source, Probe, error) {
	src, err := newSource(input)
	if err != nil {
		return source{}, Probe{}, err
	}
	p, err := t.probe(ctx, input, op)
	if err != nil {
		return source{}, Probe{}, err
	}
	return src, p, nil
}

// clampFrameTime keeps at inside the video, far enough from the end that a
// frame follows it: two frames or 100 ms, whichever is longer.
func clampFrameTime(at time.Duration, p Probe) time.Duration {
	at = max(at, 0)
	if p.Duration <= 0 {
		return at // unknown: trust the caller; Thumbnail falls back to 0
	}
	margin := 100 * time.Millisecond
	if fr := p.Video.FrameRate; fr > 0 {
		margin = max(margin, time.Duration(2*float64(time.Second)/fr))
	}
	return min(at, max(p.Duration-margin, 0))
}

func seek(at time.Duration) []string {
	if at <= 0 {
		return nil
	}
	return []string{"-ss", strconv.FormatFloat(at.Seconds(), 'f', 3, 64)}
}

// derive runs ffmpeg for operation op on src with the given input and
// output options, into a temporary file beside output that replaces output
// only when ffmpeg succeeded and wrote something.
//
// The run is killed past its work's deadline: work (the input's duration)
// times MEDIA_TIMEOUT_FACTOR, at least MEDIA_TIMEOUT_MIN; exactly that
// floor for work 0 (one frame). The error is then a [*DeadlineError].
func (t *Tool) derive(ctx context.Context, op string, src source, output string, inputOpts, outputOpts []string, work time.Duration) (err error) {
	limit := t.timeoutMin
	if work > 0 {
		limit = t.workDeadline(work)
	}
	ctx, cancel := withWorkDeadline(ctx, &DeadlineError{Tool: "ffmpeg", Op: op, Limit: limit, Work: work})
	defer cancel()
	abs, err := filepath.Abs(output)
	if err != nil {
		return fmt.Errorf("resolve output path %q: %w", output, err)
	}
	f, err := os.CreateTemp(filepath.Dir(abs), "."+filepath.Base(abs)+".*.partial")
	if err != nil {
		return fmt.Errorf("create temporary output: %w", err)
	}
	tmp := f.Name()
	if err := f.Close(); err != nil {
		return fmt.Errorf("close temporary output: %w", err)
	}
	defer func() {
		if err != nil {
			// Best effort: a leftover is named .*.partial and harmless.
			_ = os.Remove(tmp)
		}
	}()

	args := make([]string, 0, 16+len(inputOpts)+len(outputOpts))
	args = append(args, "-nostdin", "-hide_banner", "-v", "error")
	args = append(args, src.inputArgs(inputOpts...)...)
	args = append(args, outputOpts...)
	args = append(args, "-y", "file:"+tmp)
	if err := run(ctx, "ffmpeg", op, t.ffmpeg, src, args, nil); err != nil {
		return err
	}

	info, err := os.Stat(tmp)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && info.Size() == 0) {
		return errEmptyOutput
	}
	if err != nil {
		return fmt.Errorf("stat temporary output: %w", err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("chmod temporary output: %w", err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		return fmt.Errorf("move output into place: %w", err)
	}
	return nil
}
