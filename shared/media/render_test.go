package media_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/timeline"
)

// facts is what ffprobe says of a rendered file, frames counted.
type facts struct {
	duration      float64
	width, height int
	video, audio  string
	frames        int
}

func probeFacts(t *testing.T, path string) facts {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), mediatest.FFprobe(t), "-v", "error", "-count_frames", "-show_entries",
		"format=duration:stream=codec_type,codec_name,width,height,nb_read_frames", "-of", "json", path).Output()
	require.NoError(t, err)
	var got struct {
		Format  struct{ Duration string }
		Streams []struct {
			CodecType    string `json:"codec_type"`
			CodecName    string `json:"codec_name"`
			Width        int
			Height       int
			NbReadFrames string `json:"nb_read_frames"`
		}
	}
	require.NoError(t, json.Unmarshal(out, &got))
	var f facts
	f.duration, err = strconv.ParseFloat(got.Format.Duration, 64)
	require.NoError(t, err)
	for _, s := range got.Streams {
		switch s.CodecType {
		case "video":
			f.video, f.width, f.height = s.CodecName, s.Width, s.Height
			f.frames, _ = strconv.Atoi(s.NbReadFrames)
		case "audio":
			f.audio = s.CodecName
		}
	}
	return f
}

// TestRenderInChunksMatchesOnePass: three clips with a dissolve and a
// title render to the spec's duration within a frame, in the profile's
// size and codecs, and rendering in chunks (edges inside the dissolve and
// the title) gives the same duration and frame count as one pass.
func TestRenderInChunksMatchesOnePass(t *testing.T) {
	t.Parallel()
	tool := media.New(config.Media{FFmpegPath: mediatest.FFmpeg(t), FFprobePath: mediatest.FFprobe(t)})
	clip := func() string {
		return mediatest.Clip(t, mediatest.ClipParams{Duration: 4 * time.Second, Width: 320, Height: 240, Rate: 25})
	}
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	inputs := map[uuid.UUID]media.RenderInput{a: {URL: clip(), HasAudio: true}, b: {URL: clip(), HasAudio: true}, c: {URL: clip(), HasAudio: true}}
	spec, err := timeline.Shorthand{
		Clips: []timeline.ShorthandClip{
			{AssetID: a, In: 0.5, Out: 3.5},
			{AssetID: b, In: 0, Out: 3, TransitionIn: &timeline.ShorthandTransition{Type: "dissolve", Duration: 1}},
			{AssetID: c, In: 1, Out: 3, Fit: timeline.FitCover},
		},
		Titles: []timeline.ShorthandTitle{{Text: "Hello: it's 'quoted'", Start: 1, End: 3}},
	}.Lower(func(uuid.UUID) (timeline.Media, bool) {
		return timeline.Media{Ready: true, HasVideo: true, HasAudio: true, Duration: 4 * time.Second}, true
	})
	require.NoError(t, err)
	require.Equal(t, int64(7e6), spec.DurationUS)
	profile := media.Profiles["720p30-h264"]
	dir := t.TempDir()
	render := func(name string, edges ...int64) facts {
		var parts []string
		for i := 0; i+1 < len(edges); i++ {
			part := filepath.Join(dir, fmt.Sprintf("%s-%d.mkv", name, i))
			require.NoError(t, tool.RenderChunk(context.Background(), media.Chunk{Spec: spec, Inputs: inputs, Profile: profile,
				FromUS: edges[i], ToUS: edges[i+1], Output: part}))
			parts = append(parts, part)
		}
		out := filepath.Join(dir, name+".mp4")
		require.NoError(t, tool.Join(t.Context(), parts, out))
		return probeFacts(t, out)
	}
	whole := render("whole", 0, spec.DurationUS)
	chunked := render("chunked", 0, 2.5e6, 5e6, spec.DurationUS) // the first edge inside the dissolve and the title

	frame := 1.0 / float64(profile.FPS)
	require.InDelta(t, 7.0, whole.duration, frame, "the spec's duration within a frame")
	require.Equal(t, [2]int{1280, 720}, [2]int{whole.width, whole.height})
	require.Equal(t, "h264", whole.video)
	require.Equal(t, "aac", whole.audio)
	require.Equal(t, 7*profile.FPS, whole.frames)
	require.InDelta(t, whole.duration, chunked.duration, frame)
	require.Equal(t, whole.frames, chunked.frames, "chunks join to the same frames as one pass")
	require.Equal(t, whole.width, chunked.width)
	require.Equal(t, whole.audio, chunked.audio)
}

// TestTitleTextIsDrawnAsWritten: a title is a tenant's text, drawn as
// written, never expanded by drawtext. "%{pts}" shows the same pixels at
// two different times of one title (expanded, it would show each frame's
// time); "%{e:while(1,1)}" renders (expanded, ffmpeg evaluates it for
// ever) and shows text; and the title's pixels are the same in one pass
// and in chunks split inside it.
func TestTitleTextIsDrawnAsWritten(t *testing.T) {
	t.Parallel()
	ffmpeg := mediatest.FFmpeg(t)
	tool := media.New(config.Media{FFmpegPath: ffmpeg, FFprobePath: mediatest.FFprobe(t)})
	still := uuid.New()
	inputs := map[uuid.UUID]media.RenderInput{still: {URL: mediatest.Clip(t, mediatest.ClipParams{
		Duration: 3 * time.Second, Width: 320, Height: 240, Rate: 25, Color: "gray"}), HasAudio: true}}
	profile := media.Profiles["720p30-h264"]
	dir := t.TempDir()
	// render renders text (none when empty) as a title from 0.5 s to 2.5 s
	// between edges, each chunk to its own file, and returns the files.
	render := func(name, text string, edges ...int64) []string {
		sh := timeline.Shorthand{Clips: []timeline.ShorthandClip{{AssetID: still, In: 0, Out: 3}}}
		if text != "" {
			sh.Titles = []timeline.ShorthandTitle{{Text: text, Start: 0.5, End: 2.5}}
		}
		spec, err := sh.Lower(func(uuid.UUID) (timeline.Media, bool) {
			return timeline.Media{Ready: true, HasVideo: true, HasAudio: true, Duration: 3 * time.Second}, true
		})
		require.NoError(t, err)
		// A bound for a hang, not a measure: a render of 3 s takes seconds.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var parts []string
		for i := 0; i+1 < len(edges); i++ {
			part := filepath.Join(dir, fmt.Sprintf("%s-%d.mkv", name, i))
			require.NoError(t, tool.RenderChunk(ctx, media.Chunk{Spec: spec, Inputs: inputs, Profile: profile,
				FromUS: edges[i], ToUS: edges[i+1], Output: part}), "render %q", text)
			parts = append(parts, part)
		}
		return parts
	}
	// band is the bottom quarter of the frame at second at of file, where
	// titles are drawn, in gray levels.
	band := func(file string, at float64) []byte {
		out, err := exec.CommandContext(t.Context(), ffmpeg, "-nostdin", "-v", "error", "-ss", strconv.FormatFloat(at, 'f', 3, 64), "-i", file,
			"-frames:v", "1", "-vf", "crop=iw:ih/4:0:ih*3/4,format=gray", "-f", "rawvideo", "-").Output()
		require.NoError(t, err)
		require.NotEmpty(t, out)
		return out
	}
	// changed counts the pixels two bands differ in by more than a
	// quarter of the gray range: text, not the encoder's noise.
	changed := func(a, b []byte) int {
		require.Equal(t, len(a), len(b))
		n := 0
		for i := range a {
			if d := int(a[i]) - int(b[i]); d > 64 || d < -64 {
				n++
			}
		}
		return n
	}
	const same, drawn = 20, 200

	began := time.Now()
	plain := band(render("plain", "", 0, 3e6)[0], 1.0)
	plainTook := time.Since(began)
	pts := render("pts", "%{pts}", 0, 3e6)[0]
	at1, at2 := band(pts, 1.0), band(pts, 2.0)
	t.Logf("%%{pts}: %d pixels differ from no title, %d between 1 s and 2 s", changed(plain, at1), changed(at1, at2))
	require.Greater(t, changed(plain, at1), drawn, "the title is drawn")
	require.Less(t, changed(at1, at2), same, "%{pts} is drawn as written, not as each frame's time")

	began = time.Now()
	loop := band(render("loop", "%{e:while(1,1)}", 0, 3e6)[0], 1.0)
	t.Logf("render of 3 s: %s with no title, %s with %%{e:while(1,1)}", plainTook.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	require.Greater(t, changed(plain, loop), drawn, "%{e:while(1,1)} is drawn, not evaluated")

	chunks := render("chunked", "%{pts}", 0, 1.5e6, 3e6)
	require.Less(t, changed(at2, band(chunks[1], 0.5)), same, "the title shows the same pixels in a chunk as in one pass")
}

// TestAHangingDerivativeIsKilledPastItsWorksDeadline: a proxy or waveform
// ffmpeg run is killed past MEDIA_TIMEOUT_FACTOR times its input's
// duration (at least MEDIA_TIMEOUT_MIN), a thumbnail past the floor, and
// the error says which run and which deadline; an ffmpeg that never ends
// stands in for a hostile input.
func TestAHangingDerivativeIsKilledPastItsWorksDeadline(t *testing.T) {
	t.Parallel()
	hang := filepath.Join(t.TempDir(), "ffmpeg")
	require.NoError(t, os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755))
	tool := media.New(config.Media{FFmpegPath: hang, FFprobePath: mediatest.FFprobe(t), MediaTimeoutFactor: 2, MediaTimeoutMin: time.Second})
	clip := mediatest.Clip(t, mediatest.ClipParams{Duration: 1500 * time.Millisecond, Width: 64, Height: 48, Rate: 10})
	out := filepath.Join(t.TempDir(), "out")
	for _, c := range []struct {
		name  string
		run   func() error
		limit time.Duration
	}{
		{"proxy", func() error { return tool.ProxyH264(t.Context(), clip, out+".mp4") }, 3 * time.Second},
		{"waveform", func() error { return tool.Waveform(t.Context(), clip, out+".png") }, 3 * time.Second},
		{"thumbnail", func() error { return tool.Thumbnail(t.Context(), clip, out+".jpg", 0) }, time.Second},
	} {
		err := c.run()
		var d *media.DeadlineError
		require.ErrorAs(t, err, &d, c.name)
		require.Equal(t, c.limit, d.Limit, c.name)
		require.Contains(t, err.Error(), "killed past its deadline of "+c.limit.String(), c.name)
	}
}
