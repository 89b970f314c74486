package media

import (
	"context"
	"fmt"
	"time"
)

// Probe is what the pipeline keeps of ffprobe's report on one media file.
// Zero means unknown: ffprobe writes "N/A" for values a container does not
// record (a live stream's duration, a raw stream's bit rate).
type Probe struct {
	Duration   time.Duration
	FormatName string // ffprobe's demuxer list, e.g. "mov,mp4,m4a,3gp,3g2,mj2"
	SizeBytes  int64
	BitRate    int64        // bits per second
	Video      *VideoStream // the first video stream that is not cover art; nil if none
	Audio      *AudioStream // the first audio stream; nil if none
}

// VideoStream describes one video stream.
type VideoStream struct {
	Codec     string // e.g. "h264", "hevc", "vp9", "mjpeg"
	Width     int    // coded pixels; always in 1..MaxDimension
	Height    int
	FrameRate float64 // from r_frame_rate, e.g. 29.97 for "30000/1001"; 0 if unknown
	PixFmt    string  // e.g. "yuv420p"
}

// AudioStream describes one audio stream.
type AudioStream struct {
	Codec      string // e.g. "aac", "opus", "mp3"
	SampleRate int    // Hz; 0 if unknown
	Channels   int    // 0 if unknown
}

// Probe runs ffprobe on input, a local path or an http(s) URL such as a
// presigned S3 URL, and parses its report with [ParseProbe].
//
// ffprobe reads only what it needs (a file's header and index), but on a URL
// that is still network I/O: call it outside any database transaction, with
// a deadline (never more than [DefaultProbeTimeout]). A failure of
// ffprobe itself is an [*ExitError] carrying what ffprobe said; an input it
// can read but that holds no media is [ErrNoMediaStreams].
func (t *Tool) Probe(ctx context.Context, input string) (Probe, error) {
	return t.probe(ctx, input, OpProbe)
}

// probe is Probe run for operation op.
func (t *Tool) probe(ctx context.Context, input, op string) (Probe, error) {
	src, err := newSource(input)
	if err != nil {
		return Probe{}, fmt.Errorf("probe: %w", err)
	}
	ctx, cancel := withWorkDeadline(ctx, &DeadlineError{Tool: "ffprobe", Op: op, Limit: DefaultProbeTimeout})
	defer cancel()

	out := &capBuffer{max: MaxProbeOutput}
	args := append([]string{"-v", "error", "-print_format", "json", "-show_format", "-show_streams"}, src.inputArgs()...)
	err = run(ctx, "ffprobe", op, t.ffprobe, src, args, out)
	if formatRefused(err) {
		return Probe{}, fmt.Errorf("probe %s: %w", src.display, &FormatError{Reason: notAnInputFormat})
	}
	if out.overflow {
		return Probe{}, fmt.Errorf("probe %s: ffprobe wrote more than %d bytes: %w", src.display, MaxProbeOutput, ErrInvalidProbe)
	}
	if err != nil {
		return Probe{}, fmt.Errorf("probe %s: %w", src.display, err)
	}
	p, err := ParseProbe(out.buf.Bytes())
	if err != nil {
		return Probe{}, fmt.Errorf("probe %s: %w", src.display, err)
	}
	return p, nil
}
