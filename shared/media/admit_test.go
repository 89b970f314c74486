package media_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/media"
)

func TestAdmit(t *testing.T) {
	t.Parallel()
	mp4 := "mov,mp4,m4a,3gp,3g2,mj2"
	video := func(codec string, w, h int, fps float64) *media.VideoStream {
		return &media.VideoStream{Codec: codec, Width: w, Height: h, FrameRate: fps}
	}
	for _, c := range []struct {
		name   string
		p      media.Probe
		reason string // "" when taken
	}{
		{"an MP4", media.Probe{FormatName: mp4, Duration: time.Minute, Video: video("h264", 1920, 1080, 30), Audio: &media.AudioStream{Codec: "aac"}}, ""},
		{"a WebM", media.Probe{FormatName: "matroska,webm", Duration: time.Minute, Video: video("vp9", 1280, 720, 60)}, ""},
		{"a WAV", media.Probe{FormatName: "wav", Duration: time.Minute, Audio: &media.AudioStream{Codec: "pcm_s16le"}}, ""},
		{"a JPEG by its name", media.Probe{FormatName: "image2", Video: video("mjpeg", 640, 480, 25)}, ""},
		{"a PNG", media.Probe{FormatName: "png_pipe", Video: video("png", 64, 48, 25)}, ""},
		{"an AVI", media.Probe{FormatName: "avi", Duration: time.Minute, Video: video("h264", 64, 48, 25)}, `ffprobe read it as "avi"`},
		{"a concat list", media.Probe{FormatName: "concat", Duration: time.Minute, Video: video("h264", 64, 48, 25)}, "playlists, manifests and SVG are never read"},
		{"a codec off the list", media.Probe{FormatName: "matroska,webm", Duration: time.Minute, Video: video("ffv1", 64, 48, 25)}, `video codec "ffv1"`},
		{"an audio codec off the list", media.Probe{FormatName: mp4, Duration: time.Minute, Audio: &media.AudioStream{Codec: "ac3"}}, `audio codec "ac3"`},
		{"a video still in image2", media.Probe{FormatName: "image2", Video: video("h264", 64, 48, 25)}, "not PNG, JPEG or WebP"},
		{"too wide", media.Probe{FormatName: mp4, Duration: time.Minute, Video: video("h264", 8192, 1080, 30)}, "larger than the 7680x7680 cap"},
		{"too fast", media.Probe{FormatName: mp4, Duration: time.Minute, Video: video("h264", 64, 48, 240)}, "over the cap of 120"},
		{"too long", media.Probe{FormatName: mp4, Duration: 3 * time.Hour, Audio: &media.AudioStream{Codec: "aac"}}, "over the cap of 2h0m0s"},
	} {
		err := media.Admit(c.p)
		if c.reason == "" {
			require.NoError(t, err, c.name)
			continue
		}
		require.ErrorIs(t, err, media.ErrUnsupportedFormat, c.name)
		var fe *media.FormatError
		require.ErrorAs(t, err, &fe, c.name)
		require.Contains(t, fe.Reason, c.reason, c.name)
	}
}
