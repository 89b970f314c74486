package timeline

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
)

// AssetURLPrefix starts the target_url of an OTIO ExternalReference to an
// asset: aivedio://assets/<asset_id>.
const AssetURLPrefix = "aivedio://assets/"

// MetadataKey is the namespace of our metadata in OTIO objects:
//
//	timeline.metadata.aivedio.titles    [{"text", "start", "end"}] (seconds)
//	timeline.metadata.aivedio.audio     {"gain_db"} for the audio track's clip
//	clip.metadata.aivedio.fit           "contain" (default) or "cover"
const MetadataKey = "aivedio"

// OTIO is an OpenTimelineIO document as its JSON serialization writes it:
// a Timeline.1 whose Stack.1 holds one Video track (Clip.1, Clip.2, Gap.1,
// Transition.1 of type SMPTE_Dissolve) and at most one Audio track (one
// clip: the bed).
type OTIO struct {
	Schema   string     `json:"OTIO_SCHEMA"`
	Tracks   *otioStack `json:"tracks"`
	Metadata otioMeta   `json:"metadata"`
}

type otioStack struct {
	Schema   string      `json:"OTIO_SCHEMA"`
	Children []otioTrack `json:"children"`
}

type otioTrack struct {
	Schema   string     `json:"OTIO_SCHEMA"`
	Kind     string     `json:"kind"`
	Children []otioItem `json:"children"`
}

// otioItem is any child of a track.
type otioItem struct {
	Schema          string                   `json:"OTIO_SCHEMA"`
	Name            string                   `json:"name"`
	SourceRange     *otioRange               `json:"source_range"`
	MediaReference  *otioReference           `json:"media_reference"`  // Clip.1
	MediaReferences map[string]otioReference `json:"media_references"` // Clip.2
	ActiveKey       string                   `json:"active_media_reference_key"`
	TransitionType  string                   `json:"transition_type"`
	InOffset        *otioTime                `json:"in_offset"`
	OutOffset       *otioTime                `json:"out_offset"`
	Metadata        otioMeta                 `json:"metadata"`
}

type otioRange struct {
	Start    otioTime `json:"start_time"`
	Duration otioTime `json:"duration"`
}

type otioTime struct {
	Rate  float64 `json:"rate"`
	Value float64 `json:"value"`
}

type otioReference struct {
	Schema    string `json:"OTIO_SCHEMA"`
	TargetURL string `json:"target_url"`
	// AvailableRange is the media's own range: editors export sources
	// whose first frame is at a timecode (an hour, say), and a clip's
	// source_range is on that clock.
	AvailableRange *otioRange `json:"available_range"`
}

// otioMeta keeps only our namespace of an object's metadata.
type otioMeta struct {
	Aivedio struct {
		Titles []ShorthandTitle `json:"titles"`
		Audio  *struct {
			GainDB float64 `json:"gain_db"`
		} `json:"audio"`
		Fit Fit `json:"fit"`
	} `json:"aivedio"`
}

// maxTimecode bounds a point in time of an OTIO document: a source's
// timecode (its available_range) runs up to a day, and anything past it is
// refused before the arithmetic that follows could overflow.
const maxTimecode = 24 * time.Hour

// micros turns an OTIO RationalTime, a point in time, into microseconds.
func (t otioTime) micros(path string) (int64, *Error) {
	if !(t.Rate > 0) || math.IsInf(t.Value, 0) || math.IsNaN(t.Value) {
		return 0, refuse(path, "a RationalTime needs a rate above 0 and a finite value")
	}
	sec := t.Value / t.Rate
	if math.IsInf(sec, 0) || math.Abs(sec) > maxTimecode.Seconds() {
		return 0, refuse(path, "%g at rate %g is beyond %s, the longest timecode", t.Value, t.Rate, maxTimecode)
	}
	return int64(math.Round(sec * 1e6)), nil
}

// length turns an OTIO RationalTime that is a duration into microseconds:
// no longer than the longest timeline.
func (t otioTime) length(path string) (int64, *Error) {
	us, err := t.micros(path)
	if err != nil {
		return 0, err
	}
	if us > MaxDuration.Microseconds() {
		return 0, refuse(path, "%s is longer than the longest timeline (%s)", seconds(us), MaxDuration)
	}
	return us, nil
}

// schemaIs checks an object's OTIO_SCHEMA against the names it may have
// (any version of the type is read as that version's fields).
func schemaIs(path, got string, names ...string) *Error {
	name, _, _ := strings.Cut(got, ".")
	for _, n := range names {
		if name == n {
			return nil
		}
	}
	return refuse(path+".OTIO_SCHEMA", "expected %s, got %q", strings.Join(names, " or "), got)
}

// asset reads the asset id of a clip's active media reference, and where
// the media's own clock starts (its available_range), in microseconds.
func (it otioItem) asset(path string) (uuid.UUID, int64, *Error) {
	ref := it.MediaReference
	refPath := path + ".media_reference"
	if len(it.MediaReferences) > 0 {
		key := it.ActiveKey
		if key == "" {
			key = "DEFAULT_MEDIA"
		}
		r, ok := it.MediaReferences[key]
		if !ok {
			return uuid.Nil, 0, refuse(path+".active_media_reference_key", "no media reference named %q", key)
		}
		ref, refPath = &r, path+".media_references."+key
	}
	if ref == nil || !strings.HasPrefix(ref.Schema, "ExternalReference") {
		return uuid.Nil, 0, refuse(refPath, "a clip's media reference must be an ExternalReference to %s<asset_id>", AssetURLPrefix)
	}
	id, err := uuid.Parse(strings.TrimPrefix(ref.TargetURL, AssetURLPrefix))
	if !strings.HasPrefix(ref.TargetURL, AssetURLPrefix) || err != nil {
		return uuid.Nil, 0, refuse(refPath+".target_url", "target_url must be %s<asset_id>, got %q", AssetURLPrefix, ref.TargetURL)
	}
	var origin int64
	if ref.AvailableRange != nil {
		var terr *Error
		if origin, terr = ref.AvailableRange.Start.micros(refPath + ".available_range.start_time"); terr != nil {
			return uuid.Nil, 0, terr
		}
	}
	return id, origin, nil
}

// sourceRange reads an item's source range in microseconds.
func (it otioItem) sourceRange(path string) (in, out int64, err *Error) {
	if it.SourceRange == nil {
		return 0, 0, refuse(path+".source_range", "the item needs a source_range")
	}
	if in, err = it.SourceRange.Start.micros(path + ".source_range.start_time"); err != nil {
		return 0, 0, err
	}
	d, err := it.SourceRange.Duration.length(path + ".source_range.duration")
	if err != nil {
		return 0, 0, err
	}
	return in, in + d, nil
}

// Lower turns the OTIO document into a spec, by OTIO's timing: items
// follow each other by their source ranges, and a transition overlaps its
// neighbours by its offsets from their media handles without changing the
// track's duration.
func (o OTIO) Lower(resolve Resolver) (Spec, error) {
	const root = "otio"
	if err := schemaIs(root, o.Schema, "Timeline"); err != nil {
		return Spec{}, err
	}
	if o.Tracks == nil {
		return Spec{}, refuse(root+".tracks", "the timeline needs a Stack of tracks")
	}
	if err := schemaIs(root+".tracks", o.Tracks.Schema, "Stack"); err != nil {
		return Spec{}, err
	}
	b := &builder{resolve: resolve}
	video, audio := -1, -1
	for i, tr := range o.Tracks.Children {
		path := fmt.Sprintf("%s.tracks.children[%d]", root, i)
		if err := schemaIs(path, tr.Schema, "Track"); err != nil {
			return Spec{}, err
		}
		switch {
		case tr.Kind == "Video" && video < 0:
			video = i
		case tr.Kind == "Audio" && audio < 0:
			audio = i
		default:
			return Spec{}, refuse(path+".kind", "a timeline renders one Video track and at most one Audio track; this is another %q track", tr.Kind)
		}
	}
	if video < 0 {
		return Spec{}, refuse(root+".tracks", "the timeline needs a Video track")
	}
	duration, err := b.otioVideo(fmt.Sprintf("%s.tracks.children[%d]", root, video), o.Tracks.Children[video])
	if err != nil {
		return Spec{}, err
	}
	for i, t := range o.Metadata.Aivedio.Titles {
		if err := b.title(fmt.Sprintf("%s.metadata.aivedio.titles[%d]", root, i), t.Text, micros(t.Start), micros(t.End)); err != nil {
			return Spec{}, err
		}
	}
	if audio >= 0 {
		if err := b.otioAudio(fmt.Sprintf("%s.tracks.children[%d]", root, audio), o.Tracks.Children[audio], o.Metadata); err != nil {
			return Spec{}, err
		}
	}
	spec, ferr := b.finish(fmt.Sprintf("%s.tracks.children[%d]", root, video), duration,
		func(i int) string { return fmt.Sprintf("%s.metadata.aivedio.titles[%d]", root, i) })
	if ferr != nil {
		return Spec{}, ferr
	}
	return spec, nil
}

// otioVideo lowers the video track and returns its duration.
func (b *builder) otioVideo(path string, tr otioTrack) (int64, *Error) {
	at := int64(0)
	type pending struct {
		path                    string
		inOffsetUS, outOffsetUS int64
	}
	var open *pending   // a transition waiting for the clip after it
	prevClip := -1      // index in spec.Clips of the item just before, -1 when a gap or none
	prevCut := int64(0) // where the item just before starts on the track, by OTIO's timing
	headUS := int64(0)  // how much of the item just before a dissolve into it took, after its cut
	for i, it := range tr.Children {
		ipath := fmt.Sprintf("%s.children[%d]", path, i)
		switch name, _, _ := strings.Cut(it.Schema, "."); name {
		case "Transition":
			if it.TransitionType != "SMPTE_Dissolve" {
				return 0, refuse(ipath+".transition_type", "the only transition is SMPTE_Dissolve, got %q", it.TransitionType)
			}
			if prevClip < 0 || open != nil {
				return 0, refuse(ipath, "a dissolve needs a clip right before it")
			}
			var inOff, outOff int64
			var err *Error
			if it.InOffset != nil {
				if inOff, err = it.InOffset.length(ipath + ".in_offset"); err != nil {
					return 0, err
				}
			}
			if it.OutOffset != nil {
				if outOff, err = it.OutOffset.length(ipath + ".out_offset"); err != nil {
					return 0, err
				}
			}
			if inOff < 0 || outOff < 0 || inOff+outOff <= 0 {
				return 0, refuse(ipath, "a dissolve needs in_offset and out_offset of at least 0s, together longer than 0s")
			}
			if inOff+headUS > at-prevCut {
				return 0, refuse(ipath+".in_offset", "in_offset (%s) and the dissolve into the clip before it (%s) together are longer than that clip (%s)",
					seconds(inOff), seconds(headUS), seconds(at-prevCut))
			}
			// The outgoing clip plays on past the cut by out_offset: its
			// media must go on that far.
			out := &b.spec.Clips[prevClip]
			length, verr := b.video(ipath, out.AssetID)
			if verr != nil {
				return 0, verr
			}
			if out.OutUS+outOff > length+durationSlackUS {
				return 0, refuse(fmt.Sprintf("%s.children[%d]", path, i-1), "the dissolve after this clip needs %s of its media past its source_range, and asset %s ends %s after it",
					seconds(outOff), out.AssetID, seconds(length-out.OutUS))
			}
			out.OutUS += outOff
			open = &pending{path: ipath, inOffsetUS: inOff, outOffsetUS: outOff}
		case "Clip":
			id, origin, err := it.asset(ipath)
			if err != nil {
				return 0, err
			}
			in, out, err := it.sourceRange(ipath)
			if err != nil {
				return 0, err
			}
			in, out = in-origin, out-origin
			start := at
			if open != nil && open.outOffsetUS > out-in {
				return 0, refuse(open.path+".out_offset", "out_offset (%s) is longer than the clip after it (%s)", seconds(open.outOffsetUS), seconds(out-in))
			}
			if open != nil {
				// The incoming clip starts in_offset before the cut, from
				// media before its source_range.
				if in-open.inOffsetUS < 0 {
					return 0, refuse(ipath, "the dissolve before this clip needs %s of its media before its source_range, and it starts %s into asset %s",
						seconds(open.inOffsetUS), seconds(in), id)
				}
				start, in = at-open.inOffsetUS, in-open.inOffsetUS
				b.spec.Transitions = append(b.spec.Transitions, Transition{After: prevClip, StartUS: start, DurationUS: open.inOffsetUS + open.outOffsetUS})
			}
			head := int64(0)
			if open != nil {
				head, open = open.outOffsetUS, nil
			}
			if err := b.clip(ipath, id, in, out, start, it.Metadata.Aivedio.Fit); err != nil {
				return 0, err
			}
			prevClip, prevCut, headUS = len(b.spec.Clips)-1, at, head
			at = start + out - in // the cut after it, before a dissolve extends it
		case "Gap":
			if open != nil {
				return 0, refuse(open.path, "a dissolve needs a clip right after it, not a gap")
			}
			in, out, err := it.sourceRange(ipath)
			if err != nil {
				return 0, err
			}
			if err := b.gap(ipath, out-in, at); err != nil {
				return 0, err
			}
			prevClip, prevCut, headUS = -1, at, 0
			at += out - in
		default:
			return 0, refuse(ipath+".OTIO_SCHEMA", "a video track holds Clip, Gap and Transition items, not %q", it.Schema)
		}
		if at > MaxDuration.Microseconds() {
			return 0, refuse(ipath, "the track reaches %s with this item; the limit is %s", seconds(at), MaxDuration)
		}
	}
	if open != nil {
		return 0, refuse(open.path, "a dissolve needs a clip right after it")
	}
	return at, nil
}

// otioAudio lowers the audio track: one clip, the bed, at gain from the
// timeline's metadata.
func (b *builder) otioAudio(path string, tr otioTrack, meta otioMeta) *Error {
	if len(tr.Children) != 1 {
		return refuse(path, "the audio track holds one clip, the bed, from the timeline's start; it has %d items", len(tr.Children))
	}
	ipath := path + ".children[0]"
	it := tr.Children[0]
	if name, _, _ := strings.Cut(it.Schema, "."); name != "Clip" {
		return refuse(ipath+".OTIO_SCHEMA", "the audio track holds one clip, the bed, not %q", it.Schema)
	}
	id, origin, err := it.asset(ipath)
	if err != nil {
		return err
	}
	in, _, err := it.sourceRange(ipath)
	if err != nil {
		return err
	}
	in -= origin
	gain := 0.0
	if meta.Aivedio.Audio != nil {
		gain = meta.Aivedio.Audio.GainDB
	}
	return b.audio(ipath, id, in, gain)
}

// ParseOTIO reads an OTIO JSON document.
func ParseOTIO(raw json.RawMessage) (OTIO, error) {
	var o OTIO
	if err := json.Unmarshal(raw, &o); err != nil {
		return OTIO{}, refuse("otio", "not an OpenTimelineIO JSON document: %v", err)
	}
	return o, nil
}
