package probe_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

const (
	providerName = "fake"
	jobID        = "job-1"
	// testBucket is shared by the stage tests; every object lives under
	// its test's own tenant and task.
	testBucket = "aivedio-functions-test"
	// reserved is what the task's reservation holds.
	reserved = 20
)

// processingTask creates a tenant with credits and a task holding a
// reservation whose output was fetched: QUEUED -> SUBMITTING ->
// PROVIDER_RUNNING -> FETCHING -> MEDIA_PROCESSING through the state
// machine.
func processingTask(t *testing.T, pool *pgxpool.Pool) task.Task {
	t.Helper()
	ctx := t.Context()
	o := task.Origin{Producer: "test"}
	var cur task.Task
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "acme", Credits: 100}, tenant.RoleTenant)
		if err != nil {
			return err
		}
		hash := sha256.Sum256([]byte("request"))
		cur, _, err = task.Create(ctx, tx, o, task.New{TenantID: c.TenantID, IdempotencyKey: "k", RequestHash: hash[:],
			Model: "m", Prompt: "a cat", DurationSeconds: 2, Resolution: "640x360"},
			func(task.Task) ([]outbox.Event, error) { return nil, nil })
		if err != nil {
			return err
		}
		if err := billing.Reserve(ctx, tx, c.TenantID, cur.ID, reserved); err != nil {
			return err
		}
		for _, tr := range []task.Transition{
			{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}},
			{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr(jobID)}},
			{To: task.Fetching, Set: task.Fields{Progress: task.Ptr(100)}},
			{To: task.MediaProcessing},
		} {
			if cur, err = task.Apply(ctx, tx, o, cur, tr); err != nil {
				return err
			}
		}
		return nil
	}))
	return cur
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

// newStore connects to the test S3 server (S3_* variables) and makes sure
// the shared test bucket exists.
func newStore(t *testing.T) *blob.Store {
	t.Helper()
	servicetest.Env(t, "S3 server", "S3_ENDPOINT")
	servicetest.Env(t, "S3 server", "S3_ACCESS_KEY_ID")
	servicetest.Env(t, "S3 server", "S3_SECRET_ACCESS_KEY")
	var cfg config.S3
	require.NoError(t, config.Load(&cfg))
	cfg.Bucket = testBucket
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store, err := blob.New(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, store.EnsureBucket(ctx))
	return store
}

// newTool runs the ffmpeg and ffprobe that servicetest locates.
func newTool(t *testing.T) *media.Tool {
	t.Helper()
	return media.New(config.Media{FFmpegPath: mediatest.FFmpeg(t), FFprobePath: mediatest.FFprobe(t)})
}

// removeAfter deletes the objects under keys when the test ends.
func removeAfter(t *testing.T, store *blob.Store, keys ...string) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, key := range keys {
			require.NoError(t, store.Delete(ctx, key))
		}
	})
}

// cloudEvent builds the CloudEvent the adapter would deliver for one event
// about tk.
func cloudEvent(t *testing.T, tk task.Task, eventID, eventType string, payload any) event.Event {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{EventID: eventID, EventType: eventType, Producer: "test",
		AggregateType: task.AggregateType, AggregateID: tk.ID.String(), TenantID: tk.TenantID.String(), Payload: payload})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	return ce
}

// statusOf is the HTTP status a Handle error answers with; 200 for nil.
func statusOf(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return 200
	}
	var res *cehttp.Result
	require.True(t, errors.As(err, &res), "Handle returned %v, not an HTTP result", err)
	return res.StatusCode
}

// storedEvents are the outbox events of one type, oldest first.
func storedEvents(t *testing.T, pool *pgxpool.Pool, eventType string) []outbox.Stored {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE event_type = $1 ORDER BY created_at, event_id`, eventType)
	require.NoError(t, err)
	evs, err := outbox.Scan(rows)
	require.NoError(t, err)
	return evs
}

// tags lists the tags of evs.
func tags(evs []outbox.Stored) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Tag
	}
	return out
}

// inboxResult is what the inbox recorded for an event, "" when nothing.
func inboxResult(t *testing.T, pool *pgxpool.Pool, consumer, eventID string) string {
	t.Helper()
	var result string
	err := pool.QueryRow(t.Context(), `SELECT result_code FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`, consumer, eventID).Scan(&result)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	require.NoError(t, err)
	return result
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
