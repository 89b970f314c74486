package providersim_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/local/providersim"
)

// TestJobIDsAreUniqueAcrossRuns: a simulator started again with the same
// seed (as `make run` does after Ctrl-C, against a database that kept the
// first run's jobs) hands out new job ids: the seed repeats faults, not
// identities.
func TestJobIDsAreUniqueAcrossRuns(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 2 {
		b := setup(t, func(o *providersim.Options) { o.Seed = 1 })
		for range 3 {
			id := b.create(t, map[string]any{"resolution": "480p"}, nil)["id"].(string)
			require.False(t, seen[id], "job id %s handed out twice", id)
			seen[id] = true
		}
	}
}
