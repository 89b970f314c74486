package media

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNewSource(t *testing.T) {
	t.Parallel()
	wd, err := os.Getwd()
	require.NoError(t, err)

	for _, tc := range []struct {
		input, arg, protocols, display string
	}{
		{"/data/clip.mp4", "file:/data/clip.mp4", localProtocols, "/data/clip.mp4"},
		// Read as an option, or as the concat protocol, without "file:".
		{"-i", "file:" + filepath.Join(wd, "-i"), localProtocols, "-i"},
		{"concat:a.mp4|b.mp4", "file:" + filepath.Join(wd, "concat:a.mp4|b.mp4"), localProtocols, "concat:a.mp4|b.mp4"},
		{"dir/x://y", "file:" + filepath.Join(wd, "dir/x:/y"), localProtocols, "dir/x://y"},
		{"https://s3.example.com/b/k.mp4?X-Amz-Signature=abc", "https://s3.example.com/b/k.mp4?X-Amz-Signature=abc",
			remoteProtocols, "https://s3.example.com/b/k.mp4"},
		{"http://user:pw@host:9000/k%20x.mp4", "http://user:pw@host:9000/k%20x.mp4", remoteProtocols, "http://host:9000/k%20x.mp4"},
	} {
		s, err := newSource(tc.input)
		require.NoError(t, err, tc.input)
		require.Equal(t, tc.arg, s.arg, tc.input)
		require.Equal(t, tc.protocols, s.protocols, tc.input)
		require.Equal(t, tc.display, s.display, tc.input)
	}

	for _, input := range []string{"", "s3://b/k", "file:///etc/passwd", "data://x", "https:///k.mp4", "http://[::1/x"} {
		_, err := newSource(input)
		require.ErrorIs(t, err, ErrUnsupportedInput, input)
	}
}

func TestSourceRedact(t *testing.T) {
	t.Parallel()
	s, err := newSource("https://user:pw@s3.example.com/b/k.mp4?X-Amz-Credential=AK&X-Amz-Signature=abc")
	require.NoError(t, err)

	got := s.redact("https://user:pw@s3.example.com/b/k.mp4?X-Amz-Credential=AK&X-Amz-Signature=abc: Server returned 403\n" +
		"redirected to https://s3.example.com/b/k.mp4?X-Amz-Credential=AK&X-Amz-Signature=abc")
	require.Equal(t, "https://s3.example.com/b/k.mp4: Server returned 403\n"+
		"redirected to https://s3.example.com/b/k.mp4?REDACTED", got)
	require.NotContains(t, got, "pw")
}
