package knative

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// checkReplayWindow: the reconcile stage, which drops outbox and inbox
// partitions past REPLAY_WINDOW, and the API, which refuses replays older
// than it, are given the same window. With a longer one on the API, an
// operator could replay an event whose inbox rows are already gone.
func checkReplayWindow(t *testing.T, b *bundle) {
	secrets := secretExample(t)
	windows := map[string]string{}
	for _, w := range b.containers() {
		r, err := roleOf(w)
		if err != nil || (r.name != roleAPI.name && w.name != "stage-reconcile") {
			continue
		}
		v, ok := resolveEnv(b, w, secrets)["REPLAY_WINDOW"]
		require.True(t, ok, "%s: set REPLAY_WINDOW (from the ConfigMap key the other readers take)", w)
		windows[w.String()] = v
	}
	require.Len(t, windows, 2, "the API and stage-reconcile: %v", windows)
	var first string
	for w, v := range windows {
		if first == "" {
			first = v
		}
		require.Equal(t, first, v, "%s: REPLAY_WINDOW differs: %v", w, windows)
	}
}
