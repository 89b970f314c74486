package media_test

import (
	"context"
	"encoding/json"
	"fmt"
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
