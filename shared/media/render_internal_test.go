package media

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/timeline"
)

// TestEveryChunkInputHasItsOwnProtocolWhitelist: -protocol_whitelist is an
// input option, so one given before the first -i leaves every later input
// free to open any protocol. Each input of a chunk carries its own, and a
// URL input's never includes file.
func TestEveryChunkInputHasItsOwnProtocolWhitelist(t *testing.T) {
	t.Parallel()
	a, b, bed := uuid.New(), uuid.New(), uuid.New()
	spec, err := timeline.Shorthand{
		Clips: []timeline.ShorthandClip{{AssetID: a, In: 0, Out: 2}, {AssetID: b, In: 0, Out: 2}},
		Audio: &timeline.ShorthandAudio{AssetID: bed},
	}.Lower(func(uuid.UUID) (timeline.Media, bool) {
		return timeline.Media{Ready: true, HasVideo: true, HasAudio: true, Duration: 4 * time.Second}, true
	})
	require.NoError(t, err)
	inputs := map[uuid.UUID]RenderInput{
		a:   {URL: "https://s3.example.com/b/a.mp4?X-Amz-Signature=s1", HasAudio: true},
		b:   {URL: "http://127.0.0.1:9000/b/b.m3u8?X-Amz-Signature=s2"},
		bed: {URL: "/data/bed.wav", HasAudio: true},
	}
	args, secrets, _, err := chunkArgs(Chunk{Spec: spec, Inputs: inputs, Profile: Profiles["720p30-h264"], FromUS: 0, ToUS: spec.DurationUS}, t.TempDir())
	require.NoError(t, err)

	var opened []string
	whitelist := ""
	for i, arg := range args {
		switch arg {
		case "-protocol_whitelist":
			whitelist = args[i+1]
		case "-i":
			input := args[i+1]
			require.NotEmpty(t, whitelist, "input %s has no -protocol_whitelist of its own: %q", input, args)
			if strings.Contains(input, "://") {
				require.Equal(t, remoteProtocols, whitelist, "URL input %s", input)
				require.NotContains(t, strings.Split(whitelist, ","), "file", "URL input %s", input)
			} else {
				require.Equal(t, localProtocols, whitelist, "local input %s", input)
			}
			opened = append(opened, input)
			whitelist = "" // the next input must name its own
		}
	}
	require.Len(t, opened, 3, "both clips and the bed are inputs: %q", args)
	for _, in := range inputs {
		if strings.Contains(in.URL, "://") {
			require.True(t, slices.Contains(secrets, in.URL), "the presigned URL %s is redacted from ffmpeg's errors", in.URL)
		}
	}
}
