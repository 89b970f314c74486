package media

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTailBuffer(t *testing.T) {
	t.Parallel()

	b := newTailBuffer(8)
	_, _ = b.Write([]byte(" abc"))
	require.Equal(t, "abc", b.String())
	_, _ = b.Write([]byte("defg"))
	require.Equal(t, "abcdefg", b.String())
	_, _ = b.Write([]byte("hij\n"))
	require.Equal(t, "...defghij", b.String())

	b = newTailBuffer(8)
	n, err := b.Write([]byte(strings.Repeat("x", 100) + "the end"))
	require.NoError(t, err)
	require.Equal(t, 107, n)
	require.Equal(t, "...xthe end", b.String())

	b = newTailBuffer(4)
	_, _ = b.Write([]byte("é日本")) // cut inside a rune
	require.Equal(t, "...本", b.String())
}

func TestCapBuffer(t *testing.T) {
	t.Parallel()
	b := &capBuffer{max: 4}
	_, err := b.Write([]byte("abc"))
	require.NoError(t, err)
	_, err = b.Write([]byte("de"))
	require.ErrorIs(t, err, errOutputTooLarge)
	require.True(t, b.overflow)
	require.Equal(t, "abc", b.buf.String())
}
