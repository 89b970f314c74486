package media_test

import (
	"errors"
	"fmt"

	"github.com/aivedio/pipeline/shared/media"
)

func ExampleParseProbe() {
	// What `ffprobe -v error -print_format json -show_format -show_streams`
	// writes, shortened.
	out := []byte(`{
		"streams": [
			{"codec_type": "video", "codec_name": "h264", "width": 1920, "height": 1080,
			 "r_frame_rate": "30000/1001", "pix_fmt": "yuv420p"},
			{"codec_type": "audio", "codec_name": "aac", "sample_rate": "48000", "channels": 2}
		],
		"format": {"format_name": "mov,mp4,m4a,3gp,3g2,mj2", "duration": "5.005000",
		           "size": "1843200", "bit_rate": "N/A"}
	}`)
	p, err := media.ParseProbe(out)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Duration, p.SizeBytes, p.BitRate)
	fmt.Printf("%s %dx%d %.2f fps %s\n", p.Video.Codec, p.Video.Width, p.Video.Height, p.Video.FrameRate, p.Video.PixFmt)
	fmt.Printf("%s %d Hz %d channels\n", p.Audio.Codec, p.Audio.SampleRate, p.Audio.Channels)

	_, err = media.ParseProbe([]byte(`{"streams": [], "format": {"format_name": "mov"}}`))
	fmt.Println(errors.Is(err, media.ErrNoMediaStreams))
	// Output:
	// 5.005s 1843200 0
	// h264 1920x1080 29.97 fps yuv420p
	// aac 48000 Hz 2 channels
	// true
}
