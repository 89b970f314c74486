package timeline_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/timeline"
)

var (
	assetA  = uuid.MustParse("0190c0de-0000-7000-8000-00000000000a")
	assetB  = uuid.MustParse("0190c0de-0000-7000-8000-00000000000b")
	assetC  = uuid.MustParse("0190c0de-0000-7000-8000-00000000000c")
	music   = uuid.MustParse("0190c0de-0000-7000-8000-0000000000aa")
	pending = uuid.MustParse("0190c0de-0000-7000-8000-0000000000ee")
	feature = uuid.MustParse("0190c0de-0000-7000-8000-0000000000ff")
)

// library is the tenant's assets: three 10 s videos with sound, a music
// bed, an upload not probed yet, and a silent 20 min film.
func library(id uuid.UUID) (timeline.Media, bool) {
	switch id {
	case assetA, assetB, assetC:
		return timeline.Media{Ready: true, HasVideo: true, HasAudio: true, Duration: 10 * time.Second}, true
	case music:
		return timeline.Media{Ready: true, HasAudio: true, Duration: 60 * time.Second}, true
	case pending:
		return timeline.Media{}, true
	case feature:
		return timeline.Media{Ready: true, HasVideo: true, Duration: 20 * time.Minute}, true
	}
	return timeline.Media{}, false
}

const s = int64(time.Second / time.Microsecond)

func TestShorthandDissolveShortensTheTimeline(t *testing.T) {
	t.Parallel()
	spec, err := timeline.Shorthand{
		Clips: []timeline.ShorthandClip{
			{AssetID: assetA, In: 1, Out: 4},
			{AssetID: assetB, In: 2, Out: 6, TransitionIn: &timeline.ShorthandTransition{Type: "dissolve", Duration: 1}},
			{AssetID: assetC, In: 0, Out: 2.5, Fit: timeline.FitCover},
		},
		Titles: []timeline.ShorthandTitle{{Text: "Hello", Start: 0.5, End: 2.5}},
		Audio:  &timeline.ShorthandAudio{AssetID: music, GainDB: -6},
	}.Lower(library)
	require.NoError(t, err)
	require.Equal(t, timeline.Spec{
		Clips: []timeline.Clip{
			{AssetID: assetA, InUS: 1 * s, OutUS: 4 * s, StartUS: 0},
			{AssetID: assetB, InUS: 2 * s, OutUS: 6 * s, StartUS: 2 * s},
			{AssetID: assetC, InUS: 0, OutUS: 5 * s / 2, StartUS: 6 * s, Fit: timeline.FitCover},
		},
		Transitions: []timeline.Transition{{After: 0, StartUS: 2 * s, DurationUS: 1 * s}},
		Titles:      []timeline.Title{{Text: "Hello", StartUS: s / 2, EndUS: 5 * s / 2}},
		Audio:       &timeline.Audio{AssetID: music, GainDB: -6},
		DurationUS:  17 * s / 2, // 3 + 4 + 2.5 - 1
	}, spec)
	require.Equal(t, []uuid.UUID{assetA, assetB, assetC, music}, spec.Assets())
}

// TestOTIOWrittenByOpenTimelineIO reads a file OpenTimelineIO's own
// Python library wrote (testdata/gen_otio.py): the dissolve overlaps its
// neighbours from their handles and the track keeps its 10 s.
func TestOTIOWrittenByOpenTimelineIO(t *testing.T) {
	t.Parallel()
	spec, err := lowerFile(t, "three_clips.otio")
	require.NoError(t, err)
	require.Equal(t, timeline.Spec{
		Clips: []timeline.Clip{
			{AssetID: assetA, InUS: 1 * s, OutUS: 9 * s / 2, StartUS: 0},         // 1..4, plus 0.5 s past the cut
			{AssetID: assetB, InUS: 3 * s / 2, OutUS: 6 * s, StartUS: 5 * s / 2}, // 2..6, from 0.5 s before the cut
			{InUS: 0, OutUS: 1 * s, StartUS: 7 * s},                              // the gap
			{AssetID: assetC, InUS: 0, OutUS: 2 * s, StartUS: 8 * s},
		},
		Transitions: []timeline.Transition{{After: 0, StartUS: 5 * s / 2, DurationUS: 1 * s}},
		Titles:      []timeline.Title{{Text: "Hello", StartUS: s / 2, EndUS: 5 * s / 2}},
		Audio:       &timeline.Audio{AssetID: music, GainDB: -6},
		DurationUS:  10 * s, // what OpenTimelineIO says the track lasts
	}, spec)
}

func lowerFile(t *testing.T, name string) (timeline.Spec, error) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	o, err := timeline.ParseOTIO(raw)
	require.NoError(t, err)
	return o.Lower(library)
}

func TestOTIORefusals(t *testing.T) {
	t.Parallel()
	_, err := lowerFile(t, "no_handles.otio")
	requireRefused(t, err, "otio.tracks.children[0].children[2]", "before its source_range")
	_, err = lowerFile(t, "wipe.otio")
	requireRefused(t, err, "otio.tracks.children[0].children[1].transition_type", "SMPTE_Dissolve")
	_, err = timeline.ParseOTIO([]byte(`{"OTIO_SCHEMA":"Timeline.1","tracks":{"OTIO_SCHEMA":"Stack.1","children":[
		{"OTIO_SCHEMA":"Track.1","kind":"Video","children":[{"OTIO_SCHEMA":"Clip.2","source_range":{"start_time":{"rate":30,"value":0},"duration":{"rate":30,"value":30}},
		"media_references":{"DEFAULT_MEDIA":{"OTIO_SCHEMA":"ExternalReference.1","target_url":"file:///home/me/a.mov"}},"active_media_reference_key":"DEFAULT_MEDIA"}]}]}}`))
	require.NoError(t, err)
	o, _ := timeline.ParseOTIO([]byte(`{"OTIO_SCHEMA":"Timeline.1","tracks":{"OTIO_SCHEMA":"Stack.1","children":[
		{"OTIO_SCHEMA":"Track.1","kind":"Video","children":[{"OTIO_SCHEMA":"Clip.2","source_range":{"start_time":{"rate":30,"value":0},"duration":{"rate":30,"value":30}},
		"media_references":{"DEFAULT_MEDIA":{"OTIO_SCHEMA":"ExternalReference.1","target_url":"file:///home/me/a.mov"}},"active_media_reference_key":"DEFAULT_MEDIA"}]}]}}`))
	_, err = o.Lower(library)
	requireRefused(t, err, "otio.tracks.children[0].children[0].media_references.DEFAULT_MEDIA.target_url", "aivedio://assets/")
	_, err = timeline.OTIO{Schema: "Timeline.1", Tracks: nil}.Lower(library)
	requireRefused(t, err, "otio.tracks", "Stack")
}

func requireRefused(t *testing.T, err error, path, says string) {
	t.Helper()
	var te *timeline.Error
	require.True(t, errors.As(err, &te), "%v", err)
	require.Equal(t, path, te.Path, te.Message)
	require.Contains(t, te.Message, says)
}

func TestShorthandRefusals(t *testing.T) {
	t.Parallel()
	clip := func(id uuid.UUID, in, out float64) timeline.ShorthandClip {
		return timeline.ShorthandClip{AssetID: id, In: in, Out: out}
	}
	dissolve := func(c timeline.ShorthandClip, d float64) timeline.ShorthandClip {
		c.TransitionIn = &timeline.ShorthandTransition{Type: "dissolve", Duration: d}
		return c
	}
	many := make([]timeline.ShorthandClip, timeline.MaxClips+1)
	for i := range many {
		many[i] = clip(assetA, 0, 0.5)
	}
	long := []timeline.ShorthandClip{clip(feature, 0, 601)}
	for _, c := range []struct {
		name string
		s    timeline.Shorthand
		path string
		says string
	}{
		{"no clips", timeline.Shorthand{}, "timeline.clips", "no clips"},
		{"unknown asset", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(uuid.New(), 0, 1)}}, "timeline.clips[0].asset_id", "does not exist"},
		{"not ready", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(pending, 0, 1)}}, "timeline.clips[0].asset_id", "not READY"},
		{"audio as a clip", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(music, 0, 1)}}, "timeline.clips[0].asset_id", "no video stream"},
		{"in after out", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 3, 2)}}, "timeline.clips[0]", "before out"},
		{"past the end", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 11)}}, "timeline.clips[0]", "past the end"},
		{"first clip dissolves", timeline.Shorthand{Clips: []timeline.ShorthandClip{dissolve(clip(assetA, 0, 2), 1)}}, "timeline.clips[0].transition_in", "no clip before"},
		{"wipe", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 2), {AssetID: assetB, Out: 2,
			TransitionIn: &timeline.ShorthandTransition{Type: "wipe", Duration: 1}}}}, "timeline.clips[1].transition_in.type", "dissolve"},
		{"dissolve too long", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 1), dissolve(clip(assetB, 0, 4), 2)}}, "timeline.clips[1].transition_in.duration", "longer than one of the clips"},
		{"dissolves that overlap in one clip", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 3), dissolve(clip(assetB, 0, 2), 1.5),
			dissolve(clip(assetC, 0, 3), 1)}}, "timeline.clips[2].transition_in.duration", "with the dissolve into the clip before"},
		{"too many clips", timeline.Shorthand{Clips: many}, "timeline.clips[50]", "at most 50"},
		{"too long", timeline.Shorthand{Clips: long}, "timeline.clips", "the limit is 10m0s"},
		{"title past the end", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 2)}, Titles: []timeline.ShorthandTitle{{Text: "x", Start: 1, End: 3}}}, "timeline.titles[0]", "after the timeline"},
		{"blank title", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 2)}, Titles: []timeline.ShorthandTitle{{Text: " ", Start: 0, End: 1}}}, "timeline.titles[0].text", "needs text"},
		{"long title", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 2)}, Titles: []timeline.ShorthandTitle{{Text: strings.Repeat("x", 201), Start: 0, End: 1}}}, "timeline.titles[0].text", "at most 200"},
		{"silent bed", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 2)}, Audio: &timeline.ShorthandAudio{AssetID: pending}}, "timeline.audio.asset_id", "not READY"},
		{"loud bed", timeline.Shorthand{Clips: []timeline.ShorthandClip{clip(assetA, 0, 2)}, Audio: &timeline.ShorthandAudio{AssetID: music, GainDB: 20}}, "timeline.audio.gain_db", "from -60 to 12"},
		{"bad fit", timeline.Shorthand{Clips: []timeline.ShorthandClip{{AssetID: assetA, Out: 1, Fit: "stretch"}}}, "timeline.clips[0].fit", "contain"},
	} {
		_, err := c.s.Lower(library)
		requireRefused(t, err, c.path, c.says)
	}
}

func TestSameContentSameHash(t *testing.T) {
	t.Parallel()
	a, err := timeline.Shorthand{Clips: []timeline.ShorthandClip{{AssetID: assetA, In: 0, Out: 2}}}.Lower(library)
	require.NoError(t, err)
	b, err := timeline.Shorthand{Clips: []timeline.ShorthandClip{{AssetID: assetA, In: 0, Out: 2.0000001}}}.Lower(library)
	require.NoError(t, err)
	c, err := timeline.Shorthand{Clips: []timeline.ShorthandClip{{AssetID: assetA, In: 0, Out: 3}}}.Lower(library)
	require.NoError(t, err)
	require.Equal(t, a.Hash(), b.Hash(), "the same timeline to the microsecond")
	require.NotEqual(t, a.Hash(), c.Hash())
}

// TestOTIOSourceOnATimecodeClock: an editor's export whose media starts at
// an hour of timecode names its ranges on that clock; the available_range
// says where the media's own clock starts.
func TestOTIOSourceOnATimecodeClock(t *testing.T) {
	t.Parallel()
	o, err := timeline.ParseOTIO([]byte(`{"OTIO_SCHEMA":"Timeline.1","tracks":{"OTIO_SCHEMA":"Stack.1","children":[
		{"OTIO_SCHEMA":"Track.1","kind":"Video","children":[{"OTIO_SCHEMA":"Clip.2",
		"source_range":{"OTIO_SCHEMA":"TimeRange.1","start_time":{"OTIO_SCHEMA":"RationalTime.1","rate":24,"value":86424},"duration":{"OTIO_SCHEMA":"RationalTime.1","rate":24,"value":48}},
		"media_references":{"DEFAULT_MEDIA":{"OTIO_SCHEMA":"ExternalReference.1","target_url":"aivedio://assets/` + assetA.String() + `",
			"available_range":{"OTIO_SCHEMA":"TimeRange.1","start_time":{"OTIO_SCHEMA":"RationalTime.1","rate":24,"value":86400},"duration":{"OTIO_SCHEMA":"RationalTime.1","rate":24,"value":240}}}},
		"active_media_reference_key":"DEFAULT_MEDIA"}]}]}}`))
	require.NoError(t, err)
	spec, err := o.Lower(library)
	require.NoError(t, err)
	require.Equal(t, []timeline.Clip{{AssetID: assetA, InUS: 1 * s, OutUS: 3 * s}}, spec.Clips, "1 s to 3 s into the media")
}

// TestOTIOTimesPastTheCapsAreRefused: a RationalTime beyond a day of
// timecode, a duration longer than the longest timeline, and a track
// whose running position passes the limit are refused with the path of
// the item, before any arithmetic on them can overflow.
func TestOTIOTimesPastTheCapsAreRefused(t *testing.T) {
	t.Parallel()
	track := func(items string) string {
		return `{"OTIO_SCHEMA":"Timeline.1","tracks":{"OTIO_SCHEMA":"Stack.1","children":[{"OTIO_SCHEMA":"Track.1","kind":"Video","children":[` + items + `]}]}}`
	}
	clip := func(start, duration string) string {
		return fmt.Sprintf(`{"OTIO_SCHEMA":"Clip.1","source_range":{"start_time":{"rate":1,"value":%s},"duration":{"rate":1,"value":%s}},`+
			`"media_reference":{"OTIO_SCHEMA":"ExternalReference.1","target_url":"aivedio://assets/%s"}}`, start, duration, assetA)
	}
	gap := func(duration string) string {
		return `{"OTIO_SCHEMA":"Gap.1","source_range":{"start_time":{"rate":1,"value":0},"duration":{"rate":1,"value":` + duration + `}}}`
	}
	for _, c := range []struct {
		name, doc, path, says string
	}{
		{"a start far past any timecode", track(clip("1e300", "1")), "otio.tracks.children[0].children[0].source_range.start_time", "beyond 24h0m0s"},
		{"a negative start far past any timecode", track(clip("-1e19", "1")), "otio.tracks.children[0].children[0].source_range.start_time", "beyond 24h0m0s"},
		{"a duration past the longest timeline", track(clip("0", "3600")), "otio.tracks.children[0].children[0].source_range.duration", "longer than the longest timeline"},
		{"a running position past the limit", track(gap("300") + "," + gap("300") + "," + gap("300") + "," + clip("0", "1")), "otio.tracks.children[0].children[2]", "the track reaches 900.000s"},
	} {
		o, err := timeline.ParseOTIO([]byte(c.doc))
		require.NoError(t, err, c.name)
		_, err = o.Lower(library)
		requireRefused(t, err, c.path, c.says)
	}
}
