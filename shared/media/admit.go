package media

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// InputFormats are the demuxers ffmpeg and ffprobe may open an input
// with (-format_whitelist): MP4/MOV, Matroska/WebM, MPEG-TS, WAV, MP3,
// AAC, FLAC, Ogg, PNG, JPEG and WebP. A playlist or manifest (HLS, DASH,
// concat, SVG) is refused before it is read, so it can never make a
// worker open the URLs or files it lists.
//
// image2 is how ffmpeg reads a still whose name ends .jpg or .png; it reads
// through the same protocol whitelist, and [Admit] keeps it to image codecs.
const InputFormats = "mov,matroska,mpegts,wav,mp3,aac,flac,ogg,png_pipe,jpeg_pipe,webp_pipe,image2"

// The codecs an input's first video and audio streams may have.
var (
	VideoCodecs = []string{"h264", "hevc", "vp8", "vp9", "av1", "mpeg4", "prores", "png", "mjpeg", "webp"}
	AudioCodecs = []string{"aac", "mp3", "opus", "vorbis", "flac", "alac",
		"pcm_s16le", "pcm_s16be", "pcm_s24le", "pcm_s24be", "pcm_s32le", "pcm_f32le", "pcm_u8"}
)

// imageCodecs are the codecs a still is read with.
var imageCodecs = []string{"png", "mjpeg", "webp"}

// Caps on an input the pipeline takes in: past them, a file is refused
// rather than handed to ffmpeg to scale, decode or seek through.
const (
	MaxInputWidth     = 7680
	MaxInputHeight    = 7680
	MaxInputFrameRate = 120
	MaxInputDuration  = 2 * time.Hour
)

// ErrUnsupportedFormat reports an input outside [InputFormats], with a
// codec outside [VideoCodecs] or [AudioCodecs], or past a cap: permanent,
// the same bytes are refused again. The error is a [*FormatError].
var ErrUnsupportedFormat = errors.New("unsupported media format")

// FormatError is a refusal matching [ErrUnsupportedFormat]; Reason names
// what was refused and never the input's URL, so a tenant can be shown it.
type FormatError struct{ Reason string }

func (e *FormatError) Error() string { return e.Reason + ": " + ErrUnsupportedFormat.Error() }

// Is makes the refusal match [ErrUnsupportedFormat].
func (e *FormatError) Is(target error) bool { return target == ErrUnsupportedFormat }

// notAnInputFormat is the refusal of a demuxer outside [InputFormats].
var notAnInputFormat = "its container is not one of MP4/MOV, Matroska/WebM, MPEG-TS, WAV, MP3, AAC, FLAC, Ogg, PNG, JPEG, WebP (playlists, manifests and SVG are never read)"

// Admit refuses a probed input the pipeline does not take in, naming the
// format, codec or cap; nil when it is taken. A probe that could not
// open the input for its format is refused by [Tool.Probe] already.
func Admit(p Probe) error {
	refuse := func(format string, args ...any) error {
		return &FormatError{Reason: fmt.Sprintf(format, args...)}
	}
	if !formatAllowed(p.FormatName) {
		return refuse("%s: ffprobe read it as %q", notAnInputFormat, p.FormatName)
	}
	if v := p.Video; v != nil {
		switch {
		case p.FormatName == "image2" && !slices.Contains(imageCodecs, v.Codec):
			return refuse("an image file holding %q, which is not PNG, JPEG or WebP", v.Codec)
		case !slices.Contains(VideoCodecs, v.Codec):
			return refuse("video codec %q is not one of %s", v.Codec, strings.Join(VideoCodecs, ", "))
		case v.Width > MaxInputWidth || v.Height > MaxInputHeight:
			return refuse("video of %dx%d is larger than the %dx%d cap", v.Width, v.Height, MaxInputWidth, MaxInputHeight)
		case v.FrameRate > MaxInputFrameRate:
			return refuse("video at %.3g frames per second is over the cap of %d", v.FrameRate, MaxInputFrameRate)
		}
	}
	if a := p.Audio; a != nil && !slices.Contains(AudioCodecs, a.Codec) {
		return refuse("audio codec %q is not one of %s", a.Codec, strings.Join(AudioCodecs, ", "))
	}
	if p.Duration > MaxInputDuration {
		return refuse("it lasts %s, over the cap of %s", p.Duration.Round(time.Second), MaxInputDuration)
	}
	return nil
}

// formatAllowed: ffprobe names a demuxer by all its aliases
// ("mov,mp4,m4a,3gp,3g2,mj2"), as -format_whitelist matches them.
func formatAllowed(name string) bool {
	allowed := strings.Split(InputFormats, ",")
	for _, n := range strings.Split(name, ",") {
		if slices.Contains(allowed, n) {
			return true
		}
	}
	return false
}

// formatRefused reports ffmpeg's or ffprobe's refusal of an input's
// demuxer under -format_whitelist.
func formatRefused(err error) bool {
	var exit *ExitError
	return errors.As(err, &exit) && strings.Contains(exit.Stderr, "Format not on whitelist")
}
