package replay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzParseTime: never panics; an accepted time is UTC and not after now
// when given as an age.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-30T08:00:00Z", "90m", "7d", "", "-1h", "1e9d", "2026-11-30"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s, now)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		require.Equal(t, time.UTC, got.Location())
		if _, rfc := time.Parse(time.RFC3339Nano, s); rfc != nil {
			require.False(t, got.After(now), "an age lies in the past")
		}
	})
}
