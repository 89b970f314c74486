package providersim_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// TestStateFileKeepsJobs: a simulator started again on the state file of
// one that stopped while a job ran knows the job, finishes it on its
// schedule, sends the webhook the first one had not sent yet, answers a
// repeated Idempotency-Key with the same job when it honours keys, and
// counts it once.
func TestStateFileKeepsJobs(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hooks := map[string]int{}
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p map[string]any
		_ = json.NewDecoder(r.Body).Decode(&p)
		mu.Lock()
		hooks[fmt.Sprint(p["id"])]++
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)
	path := filepath.Join(t.TempDir(), "jobs")
	edit := func(o *providersim.Options) {
		o.StateFile = path
		o.HonorIdempotencyKey = true
		o.JobDurationMin, o.JobDurationMax = 500*time.Millisecond, 500*time.Millisecond
	}
	input := map[string]any{"resolution": "480p"}
	header := map[string]string{"Idempotency-Key": "attempt-1"}
	first := setup(t, edit)
	created := first.call(t, http.MethodPost, "/v1/models/acme/video/predictions",
		map[string]any{"input": input, "webhook": receiver.URL + "/hook"}, header)
	require.Equal(t, http.StatusCreated, created.status)
	id := created.json(t)["id"].(string)
	require.NoError(t, first.sim.Close())

	second := setup(t, edit)
	require.Equal(t, "succeeded", second.waitStatus(t, id, "succeeded")["status"])
	again := second.call(t, http.MethodPost, "/v1/models/acme/video/predictions",
		map[string]any{"input": input, "webhook": receiver.URL + "/hook"}, header)
	require.Equal(t, http.StatusCreated, again.status)
	require.Equal(t, id, again.json(t)["id"])
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return hooks[id] == 1
	}, 10*time.Second, 10*time.Millisecond, "the webhook comes once, from the second run")
	st := second.sim.Stats()
	require.Equal(t, 1, st.JobsCreated)
	require.Equal(t, map[string]int{"attempt-1": 1}, st.JobsByIdempotencyKey)
}
