package probe_test

import (
	"crypto/sha256"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// Helpers every stage test shares.
var (
	cloudEvent   = stagetest.CloudEvent
	statusOf     = stagetest.StatusOf
	storedEvents = stagetest.StoredEvents
	inboxResult  = stagetest.InboxResult
	newStore     = stagetest.NewStore
	removeAfter  = stagetest.RemoveAfter
	newTool      = stagetest.NewTool
)

const (
	providerName = "fake"
	jobID        = "job-1"
	// reserved is what the task's reservation holds.
	reserved = 20
)

// processingTask creates a tenant with credits and a task holding a
// reservation whose output was fetched: QUEUED -> SUBMITTING ->
// PROVIDER_RUNNING -> FETCHING -> MEDIA_PROCESSING through the state
// machine.
func processingTask(t *testing.T, pool *pgxpool.Pool) task.Task {
	t.Helper()
	return stagetest.NewTask(t, pool, &stagetest.TaskOpts{Reserved: reserved},
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}},
		task.Transition{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr(jobID)}},
		task.Transition{To: task.Fetching, Set: task.Fields{Progress: task.Ptr(100)}},
		task.Transition{To: task.MediaProcessing})
}

// storeOutput uploads the file at path as tk's output, where the fetch
// stage puts it, and records it as tk's SOURCE asset.
func storeOutput(t *testing.T, pool *pgxpool.Pool, store *blob.Store, tk task.Task, path string) uuid.UUID {
	t.Helper()
	key, err := blob.Key(tk.TenantID.String(), tk.ID.String(), "output", "video.mp4")
	require.NoError(t, err)
	removeAfter(t, store, key)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	obj, err := store.Put(t.Context(), key, f, &blob.PutOpts{ContentType: "video/mp4"})
	require.NoError(t, err)
	return sourceAsset(t, pool, tk, key, obj.Size)
}

// sourceAsset records key as tk's SOURCE asset of size bytes.
func sourceAsset(t *testing.T, pool *pgxpool.Pool, tk task.Task, key string, size int64) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	sum := sha256.Sum256([]byte(key))
	_, err := pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type)
		VALUES ($1, $2, $3, 'SOURCE', $4, $5, $6, 'video/mp4')`, id, tk.TenantID, tk.ID, key, sum[:], size)
	require.NoError(t, err)
	return id
}

// tags lists the tags of evs.
func tags(evs []outbox.Stored) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Tag
	}
	return out
}

// probeColumns are an asset's probe columns.
type probeColumns struct {
	DurationMS *int64
	Width      *int
	Height     *int
	VideoCodec *string
	AudioCodec *string
	Bitrate    *int64
	Probe      map[string]any
}

func readProbe(t *testing.T, pool *pgxpool.Pool, assetID uuid.UUID) probeColumns {
	t.Helper()
	var p probeColumns
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT duration_ms, width, height, video_codec, audio_codec, bitrate, probe
		FROM assets WHERE asset_id = $1`, assetID).Scan(&p.DurationMS, &p.Width, &p.Height, &p.VideoCodec, &p.AudioCodec, &p.Bitrate, &p.Probe))
	return p
}
