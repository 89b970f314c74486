package media

import (
	"bytes"
	"errors"
	"strings"
)

// StderrTail is how much of a tool's stderr an error keeps: the end, where
// ffmpeg says why it stopped.
const StderrTail = 4 << 10

// MaxProbeOutput bounds the JSON read from ffprobe. A real file's report is a
// few KiB per stream; more than this means a hostile or broken input.
const MaxProbeOutput = 4 << 20

// tailBuffer is an io.Writer that keeps only the last max bytes written.
type tailBuffer struct {
	max       int
	buf       []byte
	truncated bool
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) >= b.max {
		b.truncated = b.truncated || len(b.buf) > 0 || len(p) > b.max
		b.buf = append(b.buf[:0], p[len(p)-b.max:]...)
		return n, nil
	}
	if over := len(b.buf) + len(p) - b.max; over > 0 {
		b.truncated = true
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// String returns the kept bytes as trimmed, valid UTF-8, starting with "..."
// when earlier output was dropped.
func (b *tailBuffer) String() string {
	s := strings.TrimSpace(strings.ToValidUTF8(string(b.buf), ""))
	if b.truncated && s != "" {
		s = "..." + s
	}
	return s
}

var errOutputTooLarge = errors.New("output too large")

// capBuffer is an io.Writer that refuses to grow past max bytes. The refusal
// makes os/exec close the pipe, which stops the writer.
type capBuffer struct {
	max      int
	buf      bytes.Buffer
	overflow bool
}

func (b *capBuffer) Write(p []byte) (int, error) {
	if b.buf.Len()+len(p) > b.max {
		b.overflow = true
		return 0, errOutputTooLarge
	}
	return b.buf.Write(p)
}
