package timeline

import (
	"fmt"

	"github.com/google/uuid"
)

// Shorthand is the API's own timeline form, seconds as numbers:
//
//	{"clips": [{"asset_id", "in", "out", "transition_in": {"type": "dissolve", "duration"}, "fit"}],
//	 "titles": [{"text", "start", "end"}], "audio": {"asset_id", "gain_db", "in"}}
type Shorthand struct {
	Clips  []ShorthandClip  `json:"clips"`
	Titles []ShorthandTitle `json:"titles"`
	Audio  *ShorthandAudio  `json:"audio"`
}

// ShorthandClip is one clip; TransitionIn dissolves into it from the
// clip before.
type ShorthandClip struct {
	AssetID      uuid.UUID            `json:"asset_id"`
	In           float64              `json:"in"`
	Out          float64              `json:"out"`
	TransitionIn *ShorthandTransition `json:"transition_in"`
	Fit          Fit                  `json:"fit"`
}

// ShorthandTransition is a dissolve of Duration seconds.
type ShorthandTransition struct {
	Type     string  `json:"type"`
	Duration float64 `json:"duration"`
}

// ShorthandTitle is text from Start to End seconds of the output.
type ShorthandTitle struct {
	Text  string  `json:"text"`
	Start float64 `json:"start"`
	End   float64 `json:"end"`
}

// ShorthandAudio is the audio bed.
type ShorthandAudio struct {
	AssetID uuid.UUID `json:"asset_id"`
	GainDB  float64   `json:"gain_db"`
	In      float64   `json:"in"`
}

// Lower turns the shorthand into a spec. Clips follow each other; a
// transition_in overlaps a clip with the one before by its duration and
// shortens the timeline by as much (ffmpeg's xfade).
func (s Shorthand) Lower(resolve Resolver) (Spec, error) {
	b := &builder{resolve: resolve}
	const root = "timeline"
	at := int64(0)
	lastIn := int64(0) // the dissolve into the clip before, which took its start
	for i, c := range s.Clips {
		path := fmt.Sprintf("%s.clips[%d]", root, i)
		start := at
		thisIn := int64(0)
		if tr := c.TransitionIn; tr != nil {
			tpath := path + ".transition_in"
			d := micros(tr.Duration)
			switch {
			case i == 0:
				return Spec{}, refuse(tpath, "the first clip has no clip before it to dissolve from")
			case tr.Type != "dissolve":
				return Spec{}, refuse(tpath+".type", "the only transition is \"dissolve\", got %q", tr.Type)
			case d <= 0:
				return Spec{}, refuse(tpath+".duration", "a dissolve must last longer than 0s")
			case d > micros(c.Out-c.In) || d+lastIn > b.spec.Clips[i-1].OutUS-b.spec.Clips[i-1].InUS:
				return Spec{}, refuse(tpath+".duration", "a dissolve of %s is longer than one of the clips it joins (with the dissolve into the clip before, if any)", seconds(d))
			}
			thisIn = d
			start = at - d
			b.spec.Transitions = append(b.spec.Transitions, Transition{After: i - 1, StartUS: start, DurationUS: d})
		}
		if err := b.clip(path, c.AssetID, micros(c.In), micros(c.Out), start, c.Fit); err != nil {
			return Spec{}, err
		}
		at = b.spec.Clips[len(b.spec.Clips)-1].EndUS()
		lastIn = thisIn
	}
	for i, t := range s.Titles {
		if err := b.title(fmt.Sprintf("%s.titles[%d]", root, i), t.Text, micros(t.Start), micros(t.End)); err != nil {
			return Spec{}, err
		}
	}
	if s.Audio != nil {
		if err := b.audio(root+".audio", s.Audio.AssetID, micros(s.Audio.In), s.Audio.GainDB); err != nil {
			return Spec{}, err
		}
	}
	spec, err := b.finish(root+".clips", at, func(i int) string { return fmt.Sprintf("%s.titles[%d]", root, i) })
	if err != nil {
		return Spec{}, err
	}
	return spec, nil
}
