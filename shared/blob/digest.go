package blob

import (
	"fmt"
	"hash"
	"io"
)

// digestReader hashes and counts the bytes read through it (the io.TeeReader
// idea, plus a counter) and, when the expected length is known, turns a body
// of another length into an error instead of io.EOF. The transfer manager
// treats that error like any read failure and aborts the multipart upload, so
// a truncated body never becomes an object.
//
// It is read from one goroutine at a time: the transfer manager fills its part
// buffers sequentially and only the uploads run concurrently.
type digestReader struct {
	r    io.Reader
	hash hash.Hash
	n    int64
	want int64 // expected length; 0 when unknown
}

func (d *digestReader) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	if n > 0 {
		d.hash.Write(p[:n]) // a hash.Hash never fails to write
		d.n += int64(n)
	}
	if d.want > 0 && d.n > d.want {
		return n, fmt.Errorf("body is longer than the declared %d bytes", d.want)
	}
	if err == io.EOF && d.want > 0 && d.n != d.want {
		return n, fmt.Errorf("body ended after %d of the declared %d bytes: %w", d.n, d.want, io.ErrUnexpectedEOF)
	}
	return n, err
}

// sum returns the digest of the bytes read so far.
func (d *digestReader) sum() []byte { return d.hash.Sum(nil) }

// readHead reads from r until it has limit bytes or r ends, growing its
// buffer from firstReadSize so that a small body costs little memory. It
// returns io.EOF, with all the bytes, when r ended; nil when the buffer is
// full (r may hold more). No single Read asks for more than limit bytes.
func readHead(r io.Reader, limit int) ([]byte, error) {
	buf := make([]byte, 0, min(firstReadSize, limit))
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*cap(buf), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}
