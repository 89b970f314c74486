package media

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors that callers branch on. All of them are permanent for the
// input that produced them: probing or deriving the same bytes again fails
// the same way.
var (
	// ErrInvalidProbe matches every refusal of [ParseProbe] other than
	// [ErrNoMediaStreams]: malformed JSON, a missing format section, or values
	// no real file has (negative durations, dimensions over [MaxDimension],
	// frame rates with a zero denominator).
	ErrInvalidProbe = errors.New("invalid ffprobe output")

	// ErrNoMediaStreams reports a file with neither a video nor an audio
	// stream.
	ErrNoMediaStreams = errors.New("no video or audio stream")

	// ErrNoVideo reports an input without a video stream given to a helper
	// that needs one ([Tool.ProxyH264], [Tool.Thumbnail]).
	ErrNoVideo = errors.New("input has no video stream")

	// ErrNoAudio reports an input without an audio stream given to
	// [Tool.Waveform].
	ErrNoAudio = errors.New("input has no audio stream")

	// ErrUnsupportedInput reports an input that is neither a local path nor
	// an http(s) URL.
	ErrUnsupportedInput = errors.New("unsupported media input")
)

// ExitError reports that ffprobe or ffmpeg ran and failed. Stderr holds the
// end of what the tool said, with the input's query string (a presigned URL's
// signature) redacted, so the error is safe to log and to store.
//
// Whether a failure is worth retrying depends on the input: "Invalid data
// found when processing input" is permanent, "Connection refused" or "Server
// returned 5XX" on a URL input are not. The caller decides; Stderr is there
// for it.
type ExitError struct {
	Tool     string // "ffprobe" or "ffmpeg"
	ExitCode int    // -1 when the process was killed by a signal
	Stderr   string // the last [StderrTail] bytes, trimmed and redacted
	Err      error  // the underlying *exec.ExitError
}

func (e *ExitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s failed (%v)", e.Tool, e.Err)
	if e.Stderr != "" {
		b.WriteString(": ")
		b.WriteString(e.Stderr)
	}
	return b.String()
}

func (e *ExitError) Unwrap() error { return e.Err }
