package blob

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"
)

func TestReadHead(t *testing.T) {
	t.Parallel()

	data := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320,000 bytes

	for _, tc := range []struct {
		name    string
		size    int
		limit   int
		wantLen int
		wantEOF bool
	}{
		{"empty body", 0, 1000, 0, true},
		{"shorter than limit", 5000, 100_000, 5000, true},
		{"grows past the first buffer", 200_000, 300_000, 200_000, true},
		{"fills the limit", 320_000, 100_000, 100_000, false},
		{"exactly the limit", 100_000, 100_000, 100_000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &readRecorder{r: iotest.HalfReader(bytes.NewReader(data[:tc.size]))}
			head, err := readHead(rec, tc.limit)
			if tc.wantEOF {
				require.ErrorIs(t, err, io.EOF)
			} else {
				require.NoError(t, err)
			}
			require.Equal(t, data[:tc.wantLen], head)
			require.LessOrEqual(t, rec.maxAsk, tc.limit)
			require.LessOrEqual(t, cap(head), tc.limit)
		})
	}
}

func TestDigestReader(t *testing.T) {
	t.Parallel()

	data := bytes.Repeat([]byte("video"), 1000)
	want := sha256.Sum256(data)

	t.Run("unknown size", func(t *testing.T) {
		t.Parallel()
		d := &digestReader{r: iotest.OneByteReader(bytes.NewReader(data)), hash: sha256.New()}
		got, err := io.ReadAll(d)
		require.NoError(t, err)
		require.Equal(t, data, got)
		require.Equal(t, int64(len(data)), d.n)
		require.Equal(t, hex.EncodeToString(want[:]), hex.EncodeToString(d.sum()))
	})

	t.Run("declared size matches", func(t *testing.T) {
		t.Parallel()
		d := &digestReader{r: bytes.NewReader(data), hash: sha256.New(), want: int64(len(data))}
		_, err := io.ReadAll(d)
		require.NoError(t, err)
	})

	t.Run("body shorter than declared", func(t *testing.T) {
		t.Parallel()
		d := &digestReader{r: bytes.NewReader(data), hash: sha256.New(), want: int64(len(data)) + 1}
		_, err := io.ReadAll(d)
		require.ErrorIs(t, err, io.ErrUnexpectedEOF)
		require.False(t, errors.Is(err, io.EOF), "a short body must not look like a clean end")
	})

	t.Run("body longer than declared", func(t *testing.T) {
		t.Parallel()
		d := &digestReader{r: bytes.NewReader(data), hash: sha256.New(), want: int64(len(data)) - 1}
		_, err := io.ReadAll(d)
		require.ErrorContains(t, err, "longer than the declared")
	})
}

// readRecorder records the largest buffer a consumer asked to fill and the
// most bytes one Read handed out: evidence that a body is consumed in bounded
// pieces, without timing or memory measurements.
type readRecorder struct {
	r      io.Reader
	maxAsk int
	maxGot int
	total  int64
}

func (rr *readRecorder) Read(p []byte) (int, error) {
	rr.maxAsk = max(rr.maxAsk, len(p))
	n, err := rr.r.Read(p)
	rr.maxGot = max(rr.maxGot, n)
	rr.total += int64(n)
	return n, err
}
