// Package render plans a final export: the content key that makes an
// identical render reuse its stored output, and the chunks a render is
// cut into so that no delivery runs longer than a Knative request may.
//
// A render's key hashes what decides its bytes: the lowered timeline
// spec, the sha256 of every input asset, the output profile and the
// encoder version. Each chunk's key adds the chunk's window, so a chunk
// rendered once is found again by a render that resumes after a crash.
package render

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/timeline"
)

// DefaultChunk is the output length one delivery renders: well within a
// Knative request's 300 s on two cores for the profiles offered.
const DefaultChunk = 10 * time.Second

// Window is one chunk of a render: the output range [FromUS, ToUS).
type Window struct {
	Index        int
	FromUS, ToUS int64
	Key          string
}

// Key is the content key of rendering spec, whose input assets have the
// given sha256 checksums, in profile with encoder.
func Key(spec timeline.Spec, checksums map[uuid.UUID][]byte, profile, encoder string) (string, error) {
	ids := spec.Assets()
	inputs := make([]string, 0, len(ids))
	for _, id := range ids {
		sum, ok := checksums[id]
		if !ok || len(sum) != sha256.Size {
			return "", fmt.Errorf("render key: no sha256 for input asset %s", id)
		}
		inputs = append(inputs, id.String()+"="+hex.EncodeToString(sum))
	}
	slices.Sort(inputs)
	raw, err := json.Marshal(struct {
		Spec    []byte   `json:"spec"`
		Inputs  []string `json:"inputs"`
		Profile string   `json:"profile"`
		Encoder string   `json:"encoder"`
	}{spec.Hash(), inputs, profile, encoder})
	if err != nil {
		return "", fmt.Errorf("render key: %w", err)
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:]), nil
}

// Plan cuts a render of key, durationUS long at fps, into windows of
// chunk (rounded down to whole frames; the last one shorter). Edges fall
// on frame boundaries, and every chunk starts with a keyframe, so the
// chunks join by stream copy.
func Plan(key string, durationUS int64, fps int, chunk time.Duration) ([]Window, error) {
	if durationUS <= 0 || fps <= 0 {
		return nil, fmt.Errorf("render plan: duration %dus at %d fps", durationUS, fps)
	}
	frames := int64(chunk.Seconds() * float64(fps))
	if frames < 1 {
		return nil, fmt.Errorf("render plan: a chunk of %s is shorter than a frame at %d fps", chunk, fps)
	}
	var out []Window
	for i, from := 0, int64(0); from < durationUS; i++ {
		to := min(frameUS(int64(i+1)*frames, fps), durationUS)
		var b bytes.Buffer
		fmt.Fprintf(&b, "%s/%d/%d/%d", key, i, from, to)
		sum := sha256.Sum256(b.Bytes())
		out = append(out, Window{Index: i, FromUS: from, ToUS: to, Key: hex.EncodeToString(sum[:])})
		from = to
	}
	return out, nil
}

// frameUS is where frame n starts, in microseconds.
func frameUS(n int64, fps int) int64 { return n * 1_000_000 / int64(fps) }
