package transcode_test

import (
	"encoding/hex"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/blob"
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
	timeline     = stagetest.Timeline
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

// storeProbedOutput uploads the file at path as tk's output, where the
// fetch stage puts it, and records it as tk's SOURCE asset as the probe
// stage leaves it: probed, with an audio codec when the file has audio.
func storeProbedOutput(t *testing.T, pool *pgxpool.Pool, store *blob.Store, tk task.Task, path string, hasAudio bool) uuid.UUID {
	t.Helper()
	key, err := blob.Key(tk.TenantID.String(), tk.ID.String(), "output", "video.mp4")
	require.NoError(t, err)
	removeAfter(t, store, key)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	obj, err := store.Put(t.Context(), key, f, &blob.PutOpts{ContentType: "video/mp4"})
	require.NoError(t, err)
	sum, err := hex.DecodeString(obj.SHA256)
	require.NoError(t, err)
	var audio *string
	if hasAudio {
		audio = task.Ptr("aac")
	}
	id := uuid.Must(uuid.NewV7())
	_, err = pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type,
			duration_ms, width, height, video_codec, audio_codec, probe)
		VALUES ($1, $2, $3, 'SOURCE', $4, $5, $6, 'video/mp4', 1000, 160, 120, 'h264', $7, '{}')`,
		id, tk.TenantID, tk.ID, key, sum, obj.Size, audio)
	require.NoError(t, err)
	return id
}

// derivativeKey is where the transcode stage stores one derivative of tk.
func derivativeKey(t *testing.T, tk task.Task, kind, file string) string {
	t.Helper()
	key, err := blob.Key(tk.TenantID.String(), tk.ID.String(), kind, file)
	require.NoError(t, err)
	return key
}

// derivative is the part of an assets row the transcode stage writes.
type derivative struct {
	ID          uuid.UUID
	Source      uuid.UUID
	ObjectKey   string
	SHA256      []byte
	Size        int64
	ContentType string
}

// derivatives lists the derivatives of a source asset by kind.
func derivatives(t *testing.T, pool *pgxpool.Pool, source uuid.UUID) map[string]derivative {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT kind, asset_id, source_asset_id, object_key, checksum_sha256, size_bytes, content_type
		FROM assets WHERE source_asset_id = $1`, source)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]derivative{}
	for rows.Next() {
		var kind string
		var d derivative
		require.NoError(t, rows.Scan(&kind, &d.ID, &d.Source, &d.ObjectKey, &d.SHA256, &d.Size, &d.ContentType))
		out[kind] = d
	}
	require.NoError(t, rows.Err())
	return out
}
