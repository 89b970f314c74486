package probe_test

import (
	"crypto/rand"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/probe"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

type testBundle struct {
	pool  *pgxpool.Pool
	store *blob.Store
	fn    *stage.Function
	task  task.Task
}

// setup makes a MEDIA_PROCESSING task and a probe function reading
// through store (the test S3 server when nil).
func setup(t *testing.T, store *blob.Store) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t), store: newStore(t)}
	if store == nil {
		store = b.store
	}
	b.task = processingTask(t, b.pool)
	b.fn = probe.New(probe.Params{Pool: b.pool, Blob: store, Media: newTool(t)})
	return b
}

func (b *testBundle) deliver(t *testing.T, eventID string, assetID uuid.UUID) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventPostprocess,
		task.Postprocess{TaskID: b.task.ID, AssetID: assetID, Step: catalog.TagProbe}))
	return err
}

func (b *testBundle) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got
}

// clip is a one-second 160x120 test video, tiny so the tests stay fast.
func clip(t *testing.T, noAudio bool) string {
	t.Helper()
	return mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, Width: 160, Height: 120, Rate: 10, NoAudio: noAudio})
}

func TestVideoIsProbedAndDerivativesRequested(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	assetID := storeOutput(t, b.pool, b.store, b.task, clip(t, false))
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, assetID))

	p := readProbe(t, b.pool, assetID)
	require.NotNil(t, p.DurationMS)
	require.InDelta(t, 1000, *p.DurationMS, 150)
	require.Equal(t, 160, *p.Width)
	require.Equal(t, 120, *p.Height)
	require.Equal(t, "h264", *p.VideoCodec)
	require.NotNil(t, p.AudioCodec)
	require.Equal(t, "aac", *p.AudioCodec)
	require.Positive(t, *p.Bitrate)
	require.NotEmpty(t, p.Probe)

	steps := storedEvents(t, b.pool, catalog.EventPostprocess)
	require.Equal(t, []string{catalog.TagTranscodeProxy, catalog.TagThumbnail, catalog.TagWaveform}, tags(steps))
	for _, e := range steps {
		var req task.Postprocess
		require.NoError(t, json.Unmarshal(e.Envelope.Payload, &req))
		require.Equal(t, task.Postprocess{TaskID: b.task.ID, AssetID: assetID, Step: e.Tag}, req)
		require.Equal(t, id, e.Envelope.CausationID)
	}
	got := b.reload(t)
	require.Equal(t, task.MediaProcessing, got.Status)
	require.Equal(t, b.task.Version, got.Version, "probing is no transition")

	// The same event again is a duplicate: no second set of steps.
	require.NoError(t, b.deliver(t, id, assetID))
	require.Len(t, storedEvents(t, b.pool, catalog.EventPostprocess), 3)
}

func TestVideoWithoutAudioGetsNoWaveform(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	assetID := storeOutput(t, b.pool, b.store, b.task, clip(t, true))
	require.NoError(t, b.deliver(t, uuid.NewString(), assetID))

	p := readProbe(t, b.pool, assetID)
	require.Nil(t, p.AudioCodec)
	require.Equal(t, "h264", *p.VideoCodec)
	require.Equal(t, []string{catalog.TagTranscodeProxy, catalog.TagThumbnail}, tags(storedEvents(t, b.pool, catalog.EventPostprocess)))
}

func TestWhatIsNoVideoFailsTheTask(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		file func(t *testing.T) string
	}{
		{"random bytes", func(t *testing.T) string {
			path := filepath.Join(t.TempDir(), "video.mp4")
			noise := make([]byte, 32<<10)
			_, _ = rand.Read(noise)
			require.NoError(t, os.WriteFile(path, noise, 0o600))
			return path
		}},
		{"audio only", func(t *testing.T) string {
			return mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, NoVideo: true})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			assetID := storeOutput(t, b.pool, b.store, b.task, tt.file(t))
			id := uuid.NewString()
			require.NoError(t, b.deliver(t, id, assetID), "a bad output fails the task; the message is done")

			got := b.reload(t)
			require.Equal(t, task.Failed, got.Status)
			require.Equal(t, "media.not_a_video", got.ErrorCode)
			settles := storedEvents(t, b.pool, catalog.EventSettleRequested)
			require.Len(t, settles, 1, "the reservation is to be released")
			var req task.SettleRequested
			require.NoError(t, json.Unmarshal(settles[0].Envelope.Payload, &req))
			require.Equal(t, task.SettleRequested{TaskID: b.task.ID, Status: task.Failed}, req)
			require.Empty(t, storedEvents(t, b.pool, catalog.EventPostprocess))
			require.Nil(t, readProbe(t, b.pool, assetID).Probe)
			require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupProbe.Name, id))
		})
	}
}

// TestUnreachableStorageIsRetried: ffprobe exits non-zero when it cannot
// read the presigned URL at all. That says nothing about the bytes, so the
// probe is retried instead of failing a paid generation as "not a video".
func TestUnreachableStorageIsRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		endpoint func(t *testing.T) string
	}{
		{"server error", func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				http.Error(w, "slow down", http.StatusServiceUnavailable)
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		}},
		{"connection refused", func(t *testing.T) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			addr := l.Addr().String()
			require.NoError(t, l.Close())
			return "http://" + addr
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			down, err := blob.New(t.Context(), config.S3{Endpoint: tt.endpoint(t), Region: "us-east-1", Bucket: stagetest.Bucket,
				AccessKeyID: "test", SecretAccessKey: "test"})
			require.NoError(t, err)
			b := setup(t, down)
			assetID := sourceAsset(t, b.pool, b.task, "tenants/x/tasks/y/output/video.mp4", 1024)
			id := uuid.NewString()
			err = b.deliver(t, id, assetID)
			require.GreaterOrEqual(t, statusOf(t, err), 500, "retryable: %v", err)

			got := b.reload(t)
			require.Equal(t, task.MediaProcessing, got.Status)
			require.Equal(t, b.task.Version, got.Version)
			require.Empty(t, storedEvents(t, b.pool, catalog.EventSettleRequested))
			require.Empty(t, inboxResult(t, b.pool, catalog.GroupProbe.Name, id), "nothing recorded: the redelivery gets its chance")
		})
	}
}

func TestProbeOfAnotherTasksAssetIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	other := processingTask(t, b.pool)
	assetID := sourceAsset(t, b.pool, other, "tenants/x/tasks/z/output/video.mp4", 1024)
	err := b.deliver(t, uuid.NewString(), assetID)
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	require.Equal(t, task.MediaProcessing, b.reload(t).Status)
}

// TestAMissingOutputNeedsAttention: an output that is no longer in storage
// cannot be probed on any delivery: the task goes to NEEDS_ATTENTION
// naming the object, instead of being retried until the dead-letter queue.
func TestAMissingOutputNeedsAttention(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	key := "tenants/x/tasks/" + b.task.ID.String() + "/output/video.mp4"
	assetID := sourceAsset(t, b.pool, b.task, key, 1024)
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, assetID), "answered: the task holds the reason")

	got := b.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "media.source_missing", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, key)
	require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupProbe.Name, id))
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPostprocess))
}

// TestAnAssetOfAnotherTenantIsASecurityError: the asset names this task,
// but another tenant owns it (seed 7.15.3): refused as
// security.tenant_mismatch, whatever the task says.
func TestAnAssetOfAnotherTenantIsASecurityError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	stranger := processingTask(t, b.pool) // a task of another tenant
	assetID := sourceAsset(t, b.pool, b.task, "tenants/x/tasks/y/output/video.mp4", 1024)
	_, err := b.pool.Exec(t.Context(), `UPDATE assets SET tenant_id = $2 WHERE asset_id = $1`, assetID, stranger.TenantID)
	require.NoError(t, err)

	err = b.deliver(t, uuid.NewString(), assetID)
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	_, code := outcome.Of(outcome.FromResult(err))
	require.Equal(t, "security.tenant_mismatch", code)
	require.Equal(t, task.MediaProcessing, b.reload(t).Status)
}
