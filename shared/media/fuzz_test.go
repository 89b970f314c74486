package media_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/media"
)

// FuzzParseProbe: ParseProbe never panics, refuses only with its sentinels,
// and whatever it accepts has sane fields.
func FuzzParseProbe(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := media.ParseProbe(data)
		if err != nil {
			require.True(t, errors.Is(err, media.ErrInvalidProbe) || errors.Is(err, media.ErrNoMediaStreams),
				"unclassified error: %v", err)
			require.Equal(t, media.Probe{}, p)
			return
		}
		requireSane(t, p)
	})
}

func requireSane(t *testing.T, p media.Probe) {
	t.Helper()
	require.True(t, p.Video != nil || p.Audio != nil, "accepted a probe without media streams")
	require.GreaterOrEqual(t, p.Duration, time.Duration(0))
	require.LessOrEqual(t, p.Duration, media.MaxDuration)
	require.GreaterOrEqual(t, p.SizeBytes, int64(0))
	require.GreaterOrEqual(t, p.BitRate, int64(0))
	if v := p.Video; v != nil {
		require.True(t, v.Width >= 1 && v.Width <= media.MaxDimension, "width %d", v.Width)
		require.True(t, v.Height >= 1 && v.Height <= media.MaxDimension, "height %d", v.Height)
		require.False(t, math.IsNaN(v.FrameRate) || math.IsInf(v.FrameRate, 0), "frame rate %v", v.FrameRate)
		require.True(t, v.FrameRate >= 0 && v.FrameRate <= media.MaxFrameRate, "frame rate %v", v.FrameRate)
	}
	if a := p.Audio; a != nil {
		require.True(t, a.SampleRate >= 0 && a.SampleRate <= media.MaxSampleRate, "sample rate %d", a.SampleRate)
		require.True(t, a.Channels >= 0 && a.Channels <= media.MaxChannels, "channels %d", a.Channels)
	}
}
