package media_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/media"
)

// realProbe is what ffprobe 5.1 writes for mediatest's default clip (trimmed
// of fields ParseProbe ignores).
const realProbe = `{
    "streams": [
        {
            "index": 0, "codec_name": "h264", "codec_type": "video",
            "width": 320, "height": 240, "pix_fmt": "yuv420p",
            "r_frame_rate": "25/1", "avg_frame_rate": "25/1",
            "duration": "2.000000", "bit_rate": "138048",
            "disposition": {"default": 1, "attached_pic": 0}
        },
        {
            "index": 1, "codec_name": "aac", "codec_type": "audio",
            "sample_fmt": "fltp", "sample_rate": "44100", "channels": 1,
            "r_frame_rate": "0/0", "avg_frame_rate": "0/0",
            "duration": "2.000000", "bit_rate": "69671"
        }
    ],
    "format": {
        "filename": "clip.mp4", "nb_streams": 2,
        "format_name": "mov,mp4,m4a,3gp,3g2,mj2",
        "start_time": "0.000000", "duration": "2.000000",
        "size": "54823", "bit_rate": "219292", "probe_score": 100
    }
}`

type parseCase struct {
	name    string
	data    string
	want    media.Probe
	wantErr error  // nil: success
	errText string // a part of the error message, when it matters
}

var parseCases = []parseCase{
	{
		name: "real clip",
		data: realProbe,
		want: media.Probe{
			Duration: 2 * time.Second, FormatName: "mov,mp4,m4a,3gp,3g2,mj2", SizeBytes: 54823, BitRate: 219292,
			Video: &media.VideoStream{Codec: "h264", Width: 320, Height: 240, FrameRate: 25, PixFmt: "yuv420p"},
			Audio: &media.AudioStream{Codec: "aac", SampleRate: 44100, Channels: 1},
		},
	},
	{
		name: "N/A values are zero",
		data: `{"streams":[{"codec_type":"video","codec_name":"h264","width":1920,"height":1080,
			"r_frame_rate":"30000/1001"}],
			"format":{"format_name":"mpegts","duration":"N/A","size":"N/A","bit_rate":"N/A"}}`,
		want: media.Probe{
			FormatName: "mpegts",
			Video:      &media.VideoStream{Codec: "h264", Width: 1920, Height: 1080, FrameRate: 30000.0 / 1001},
		},
	},
	{
		name: "numbers as JSON numbers",
		data: `{"streams":[{"codec_type":"audio","codec_name":"opus","sample_rate":48000,"channels":2}],
			"format":{"format_name":"ogg","duration":1.5,"size":1000,"bit_rate":64000}}`,
		want: media.Probe{
			Duration: 1500 * time.Millisecond, FormatName: "ogg", SizeBytes: 1000, BitRate: 64000,
			Audio: &media.AudioStream{Codec: "opus", SampleRate: 48000, Channels: 2},
		},
	},
	{
		name: "audio only",
		data: `{"streams":[{"codec_type":"audio","codec_name":"mp3","sample_rate":"44100","channels":2,
			"r_frame_rate":"0/0"}],
			"format":{"format_name":"mp3","duration":"3.500000","size":"56000","bit_rate":"128000"}}`,
		want: media.Probe{
			Duration: 3500 * time.Millisecond, FormatName: "mp3", SizeBytes: 56000, BitRate: 128000,
			Audio: &media.AudioStream{Codec: "mp3", SampleRate: 44100, Channels: 2},
		},
	},
	{
		name: "cover art is not video",
		data: `{"streams":[
			{"codec_type":"audio","codec_name":"mp3","sample_rate":"44100","channels":2},
			{"codec_type":"video","codec_name":"mjpeg","width":500,"height":500,"r_frame_rate":"90000/1",
				"disposition":{"attached_pic":1}}],
			"format":{"format_name":"mp3","duration":"3.0"}}`,
		want: media.Probe{
			Duration: 3 * time.Second, FormatName: "mp3",
			Audio: &media.AudioStream{Codec: "mp3", SampleRate: 44100, Channels: 2},
		},
	},
	{
		name: "video only, first video stream wins",
		data: `{"streams":[
			{"codec_type":"data","codec_name":"bin_data"},
			{"codec_type":"video","codec_name":"vp9","width":640,"height":360,"r_frame_rate":"24/1","pix_fmt":"yuv420p"},
			{"codec_type":"video","codec_name":"h264","width":1280,"height":720,"r_frame_rate":"30/1"}],
			"format":{"format_name":"matroska,webm","duration":"10.000000"}}`,
		want: media.Probe{
			Duration: 10 * time.Second, FormatName: "matroska,webm",
			Video: &media.VideoStream{Codec: "vp9", Width: 640, Height: 360, FrameRate: 24, PixFmt: "yuv420p"},
		},
	},
	{
		name: "duration from the longest stream when the format has none",
		data: `{"streams":[
			{"codec_type":"video","codec_name":"h264","width":320,"height":240,"r_frame_rate":"25/1","duration":"1.960000"},
			{"codec_type":"audio","codec_name":"aac","sample_rate":"44100","channels":1,"duration":"2.020000"}],
			"format":{"format_name":"mov","duration":"N/A"}}`,
		want: media.Probe{
			Duration: 2020 * time.Millisecond, FormatName: "mov",
			Video: &media.VideoStream{Codec: "h264", Width: 320, Height: 240, FrameRate: 25},
			Audio: &media.AudioStream{Codec: "aac", SampleRate: 44100, Channels: 1},
		},
	},
	{
		name: "time-base frame rate falls back to the average",
		data: `{"streams":[{"codec_type":"video","codec_name":"vp8","width":640,"height":480,
			"r_frame_rate":"1000/1","avg_frame_rate":"30/1"}],"format":{"format_name":"matroska,webm"}}`,
		want: media.Probe{
			FormatName: "matroska,webm",
			Video:      &media.VideoStream{Codec: "vp8", Width: 640, Height: 480, FrameRate: 30},
		},
	},
	{
		name: "time-base frame rate without an average is unknown",
		data: `{"streams":[{"codec_type":"video","codec_name":"vp8","width":640,"height":480,
			"r_frame_rate":"1000/1","avg_frame_rate":"0/0"}],"format":{"format_name":"matroska,webm"}}`,
		want: media.Probe{
			FormatName: "matroska,webm",
			Video:      &media.VideoStream{Codec: "vp8", Width: 640, Height: 480},
		},
	},
	{
		name:    "no streams",
		data:    `{"streams":[],"format":{"format_name":"mov","duration":"1.0"}}`,
		wantErr: media.ErrNoMediaStreams,
	},
	{
		name:    "only a data stream",
		data:    `{"streams":[{"codec_type":"data"}],"format":{"format_name":"mov"}}`,
		wantErr: media.ErrNoMediaStreams,
	},
	{
		name:    "what ffprobe prints for a text file",
		data:    "{\n\n}\n",
		wantErr: media.ErrInvalidProbe,
		errText: "no format section",
	},
	{
		name:    "zero denominator frame rate",
		data:    `{"streams":[{"codec_type":"video","width":320,"height":240,"r_frame_rate":"25/0"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
		errText: "zero denominator",
	},
	{
		name:    "0/0 frame rate on a video stream",
		data:    `{"streams":[{"codec_type":"video","width":320,"height":240,"r_frame_rate":"0/0"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
		errText: "zero denominator",
	},
	{
		name:    "frame rate not a fraction",
		data:    `{"streams":[{"codec_type":"video","width":320,"height":240,"r_frame_rate":"fast"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "negative frame rate",
		data:    `{"streams":[{"codec_type":"video","width":320,"height":240,"r_frame_rate":"-25/1"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "negative duration",
		data:    `{"streams":[{"codec_type":"audio","sample_rate":"44100"}],"format":{"duration":"-1.000000"}}`,
		wantErr: media.ErrInvalidProbe,
		errText: "format.duration",
	},
	{
		name:    "negative stream duration",
		data:    `{"streams":[{"codec_type":"audio","duration":"-3"}],"format":{"duration":"N/A"}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "absurd duration",
		data:    `{"streams":[{"codec_type":"audio"}],"format":{"duration":"1e300"}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "NaN duration",
		data:    `{"streams":[{"codec_type":"audio"}],"format":{"duration":"NaN"}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "huge dimensions",
		data:    `{"streams":[{"codec_type":"video","width":100000,"height":240,"r_frame_rate":"25/1"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
		errText: "width",
	},
	{
		name:    "negative dimensions",
		data:    `{"streams":[{"codec_type":"video","width":320,"height":-240,"r_frame_rate":"25/1"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "video without pixels",
		data:    `{"streams":[{"codec_type":"video","width":0,"height":0,"r_frame_rate":"25/1"}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "negative size",
		data:    `{"streams":[{"codec_type":"audio"}],"format":{"size":"-5"}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "size overflows int64",
		data:    `{"streams":[{"codec_type":"audio"}],"format":{"size":"99999999999999999999"}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "bit rate not a number",
		data:    `{"streams":[{"codec_type":"audio"}],"format":{"bit_rate":"fast"}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "absurd channel count",
		data:    `{"streams":[{"codec_type":"audio","channels":100000}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "malformed JSON",
		data:    `{"streams":[{"codec_type":"video"`,
		wantErr: media.ErrInvalidProbe,
		errText: "malformed JSON",
	},
	{
		name:    "wrong JSON types",
		data:    `{"streams":{"codec_type":"video"},"format":[]}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "a boolean where a number belongs",
		data:    `{"streams":[{"codec_type":"video","width":true}],"format":{}}`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "null",
		data:    `null`,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "empty",
		data:    ``,
		wantErr: media.ErrInvalidProbe,
	},
	{
		name:    "trailing garbage",
		data:    realProbe + `{}`,
		wantErr: media.ErrInvalidProbe,
	},
}

func TestParseProbe(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := media.ParseProbe([]byte(tc.data))
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				if tc.errText != "" {
					require.ErrorContains(t, err, tc.errText)
				}
				require.Equal(t, media.Probe{}, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
