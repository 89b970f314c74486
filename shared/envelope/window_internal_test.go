package envelope

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadWindow: during a dual-read window a build reads schema N-1 and N
// side by side, and refuses what is outside it.
func TestReadWindow(t *testing.T) {
	t.Parallel()
	for v, want := range map[int]bool{0: false, 1: true, 2: true, 3: false} {
		require.Equal(t, want, inWindow(v, 1, 2), "version %d in 1..2", v)
	}
	require.Equal(t, "1 to 2", supportedVersions(1, 2))
	require.Equal(t, "1", supportedVersions(1, 1))

	// This build's window holds what it writes.
	require.True(t, Readable(SchemaVersion))
	require.LessOrEqual(t, OldestReadSchemaVersion, SchemaVersion)
	require.GreaterOrEqual(t, NewestReadSchemaVersion, SchemaVersion)
	require.LessOrEqual(t, NewestReadSchemaVersion-OldestReadSchemaVersion, 1, "a window spans two versions at most")
	require.False(t, Readable(NewestReadSchemaVersion+1))
}
