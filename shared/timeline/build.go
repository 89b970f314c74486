package timeline

import (
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// durationSlackUS is how far past an asset's probed duration a range may
// end: durations are stored to the millisecond.
const durationSlackUS = 1000

// builder checks the elements both formats lower to, naming each by the
// path it had in what was posted.
type builder struct {
	resolve Resolver
	spec    Spec
}

// video checks that id is a READY asset with a picture, and returns its
// duration.
func (b *builder) video(path string, id uuid.UUID) (int64, *Error) {
	m, ok := b.resolve(id)
	switch {
	case !ok:
		return 0, refuse(path, "asset %s does not exist", id)
	case !m.Ready:
		return 0, refuse(path, "asset %s is not READY yet: complete its upload and wait for its probe (GET /v1/assets/%s)", id, id)
	case m.HeldByReview != "":
		return 0, refuse(path, "asset %s is held by the content review of its generation (review %s): it can be used once the review approves it", id, m.HeldByReview)
	case !m.HasVideo:
		return 0, refuse(path, "asset %s has no video stream: a clip needs one", id)
	}
	return m.Duration.Microseconds(), nil
}

// clip adds a clip of asset id over source [in, out) at start, after
// checking the range against the asset's probed duration.
func (b *builder) clip(path string, id uuid.UUID, in, out, start int64, fit Fit) *Error {
	if len(b.spec.Clips) >= MaxClips {
		return refuse(path, "a timeline holds at most %d clips", MaxClips)
	}
	if fit != "" && fit != FitContain && fit != FitCover {
		return refuse(path+".fit", "fit must be %q or %q, got %q", FitContain, FitCover, fit)
	}
	length, err := b.video(path+".asset_id", id)
	if err != nil {
		return err
	}
	switch {
	case in < 0:
		return refuse(path, "the clip starts before its asset (in %s)", seconds(in))
	case out <= in:
		return refuse(path, "in (%s) must be before out (%s)", seconds(in), seconds(out))
	case out > length+durationSlackUS:
		return refuse(path, "out (%s) is past the end of asset %s (%s long)", seconds(out), id, seconds(length))
	}
	b.spec.Clips = append(b.spec.Clips, Clip{AssetID: id, InUS: in, OutUS: out, StartUS: start, Fit: fit})
	return nil
}

// gap adds black and silence of length at start.
func (b *builder) gap(path string, length, start int64) *Error {
	if len(b.spec.Clips) >= MaxClips {
		return refuse(path, "a timeline holds at most %d clips", MaxClips)
	}
	if length <= 0 {
		return refuse(path, "a gap must last longer than 0s")
	}
	b.spec.Clips = append(b.spec.Clips, Clip{InUS: 0, OutUS: length, StartUS: start})
	return nil
}

// title adds text over [start, end).
func (b *builder) title(path, text string, start, end int64) *Error {
	if len(b.spec.Titles) >= MaxTitles {
		return refuse(path, "a timeline holds at most %d titles", MaxTitles)
	}
	switch n := utf8.RuneCountInString(text); {
	case strings.TrimSpace(text) == "":
		return refuse(path+".text", "a title needs text")
	case n > MaxTitleChars:
		return refuse(path+".text", "a title is at most %d characters, this one %d", MaxTitleChars, n)
	case strings.ContainsFunc(text, func(r rune) bool { return r < ' ' && r != '\n' }):
		return refuse(path+".text", "a title may not hold control characters")
	case start < 0 || end <= start:
		return refuse(path, "start (%s) must be at least 0s and before end (%s)", seconds(start), seconds(end))
	}
	b.spec.Titles = append(b.spec.Titles, Title{Text: text, StartUS: start, EndUS: end})
	return nil
}

// audio sets the bed: asset id from in, at gain.
func (b *builder) audio(path string, id uuid.UUID, in int64, gain float64) *Error {
	m, ok := b.resolve(id)
	switch {
	case !ok:
		return refuse(path+".asset_id", "asset %s does not exist", id)
	case !m.Ready:
		return refuse(path+".asset_id", "asset %s is not READY yet", id)
	case m.HeldByReview != "":
		return refuse(path+".asset_id", "asset %s is held by the content review of its generation (review %s): it can be used once the review approves it", id, m.HeldByReview)
	case !m.HasAudio:
		return refuse(path+".asset_id", "asset %s has no audio stream", id)
	case gain < MinGainDB || gain > MaxGainDB:
		return refuse(path+".gain_db", "gain_db must be from %d to %d, got %g", MinGainDB, MaxGainDB, gain)
	case in < 0 || in >= m.Duration.Microseconds():
		return refuse(path, "the bed starts at %s, outside its asset (%s long)", seconds(in), seconds(m.Duration.Microseconds()))
	}
	b.spec.Audio = &Audio{AssetID: id, InUS: in, GainDB: gain}
	return nil
}

// finish checks the whole: something to render, within the length limit,
// titles inside it.
func (b *builder) finish(root string, duration int64, titlePath func(i int) string) (Spec, *Error) {
	if len(b.spec.Clips) == 0 || duration <= 0 {
		return Spec{}, refuse(root, "the timeline has no clips")
	}
	if duration > MaxDuration.Microseconds() {
		return Spec{}, refuse(root, "the timeline lasts %s; the limit is %s", seconds(duration), MaxDuration)
	}
	for i, t := range b.spec.Titles {
		if t.EndUS > duration {
			return Spec{}, refuse(titlePath(i), "the title ends at %s, after the timeline (%s)", seconds(t.EndUS), seconds(duration))
		}
	}
	b.spec.DurationUS = duration
	if b.spec.Transitions == nil {
		b.spec.Transitions = []Transition{}
	}
	if b.spec.Titles == nil {
		b.spec.Titles = []Title{}
	}
	return b.spec, nil
}
