// Package timeline turns what an editor sends, the shorthand timeline or
// OpenTimelineIO JSON, into one internal render spec: clips of the
// tenant's assets placed on the output timeline, dissolves between them,
// titles and an audio bed, every time in microseconds.
//
// Each format keeps its own timing rule. A shorthand `transition_in`
// overlaps the two clips and shortens the timeline by its duration, as
// ffmpeg's xfade does. An OTIO Transition.1 follows OpenTimelineIO: it
// overlaps its neighbours by its in and out offsets, using their media
// handles (the source beyond each clip's range), and leaves the track's
// duration unchanged; a clip without the handle a transition needs is
// refused, naming the clip. The spec's Duration says which total resulted.
//
// Every refusal is an [*Error] naming the offending element by a JSON
// path ("timeline.clips[1].out", "otio.tracks.children[0].children[2]"),
// for a 4xx a person can act on.
package timeline

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Limits of a timeline.
const (
	MaxClips      = 50
	MaxTitles     = 20
	MaxTitleChars = 200
	MaxDuration   = 10 * time.Minute
	MinGainDB     = -60
	MaxGainDB     = 12
)

// Fit is how a clip of another shape fills the output frame.
type Fit string

// The fits: the whole picture, padded (the default); or the frame filled,
// cropped.
const (
	FitContain Fit = "contain"
	FitCover   Fit = "cover"
)

// Spec is a timeline lowered for rendering. It is immutable once made;
// [Spec.Hash] identifies its content.
type Spec struct {
	// Clips are the video track's items in order; a gap (black and
	// silence) has no asset.
	Clips []Clip `json:"clips"`
	// Transitions are dissolves between clip After and clip After+1.
	Transitions []Transition `json:"transitions"`
	Titles      []Title      `json:"titles"`
	Audio       *Audio       `json:"audio,omitempty"`
	// DurationUS is the output's length.
	DurationUS int64 `json:"duration_us"`
}

// Clip is a source range of an asset placed on the output timeline.
type Clip struct {
	AssetID uuid.UUID `json:"asset_id,omitzero"` // zero for a gap
	InUS    int64     `json:"in_us"`             // source range, within the asset
	OutUS   int64     `json:"out_us"`
	StartUS int64     `json:"start_us"` // where it starts on the output timeline
	Fit     Fit       `json:"fit,omitempty"`
}

// Gap reports whether the clip is black and silence.
func (c Clip) Gap() bool { return c.AssetID == uuid.Nil }

// EndUS is where the clip ends on the output timeline.
func (c Clip) EndUS() int64 { return c.StartUS + c.OutUS - c.InUS }

// Transition is a dissolve from clip After to clip After+1.
type Transition struct {
	After      int   `json:"after"`
	StartUS    int64 `json:"start_us"`
	DurationUS int64 `json:"duration_us"`
}

// Title is text drawn over the output from StartUS to EndUS.
type Title struct {
	Text    string `json:"text"`
	StartUS int64  `json:"start_us"`
	EndUS   int64  `json:"end_us"`
}

// Audio is a bed under the whole output, from InUS of its asset; a bed
// shorter than the output ends early.
type Audio struct {
	AssetID uuid.UUID `json:"asset_id"`
	InUS    int64     `json:"in_us"`
	GainDB  float64   `json:"gain_db"`
}

// Duration is the output's length.
func (s Spec) Duration() time.Duration { return time.Duration(s.DurationUS) * time.Microsecond }

// Assets lists the assets the spec reads, each once, in order of use.
func (s Spec) Assets() []uuid.UUID {
	var out []uuid.UUID
	seen := map[uuid.UUID]bool{}
	add := func(id uuid.UUID) {
		if id != uuid.Nil && !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, c := range s.Clips {
		add(c.AssetID)
	}
	if s.Audio != nil {
		add(s.Audio.AssetID)
	}
	return out
}

// Hash identifies the spec's content: two posts that lower to the same
// spec are the same revision.
func (s Spec) Hash() []byte {
	raw, err := json.Marshal(s)
	if err != nil {
		panic(fmt.Sprintf("timeline: encode spec: %v", err)) // plain data: cannot fail
	}
	sum := sha256.Sum256(raw)
	return sum[:]
}

// Media is what the lowering needs to know of an asset the timeline
// names.
type Media struct {
	Ready bool
	// HeldByReview is the status of a content review that has not
	// approved the asset (a generation's output): it may not be used yet,
	// or never. Empty when nothing holds it.
	HeldByReview string
	HasVideo     bool
	HasAudio     bool
	Duration     time.Duration
}

// Resolver finds an asset of the tenant; false for one that does not
// exist or is another tenant's (the two read alike).
type Resolver func(id uuid.UUID) (Media, bool)

// Error is a refused timeline: the element at Path, and why.
type Error struct {
	Path    string
	Message string
}

func (e *Error) Error() string { return e.Path + ": " + e.Message }

func refuse(path, format string, args ...any) *Error {
	return &Error{Path: path, Message: fmt.Sprintf(format, args...)}
}

// micros turns seconds into microseconds.
func micros(seconds float64) int64 { return int64(seconds*1e6 + 0.5*sign(seconds)) }

func sign(f float64) float64 {
	if f < 0 {
		return -1
	}
	return 1
}

func seconds(us int64) string { return fmt.Sprintf("%.3fs", float64(us)/1e6) }
