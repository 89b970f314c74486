package transcode_test

import (
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/transcode"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/task"
)

type testBundle struct {
	pool   *pgxpool.Pool
	store  *blob.Store
	fn     *stage.Function
	task   task.Task
	source uuid.UUID
}

// step is one derivative: its step tag, assets kind, where it is stored
// and how its file begins.
type step struct {
	tag, kind, contentType, key string
	magic                       []byte
	magicAt                     int
}

// setup makes a MEDIA_PROCESSING task whose output (a tiny real clip, with
// or without audio) is stored and probed, and a transcode function.
func setup(t *testing.T, hasAudio bool) (*testBundle, []step) {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t), store: newStore(t)}
	b.task = processingTask(t, b.pool)
	path := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, Width: 160, Height: 120, Rate: 10, NoAudio: !hasAudio})
	b.source = storeProbedOutput(t, b.pool, b.store, b.task, path, hasAudio)
	steps := []step{
		{catalog.TagTranscodeProxy, "PROXY", "video/mp4", derivativeKey(t, b.task, "proxy", "proxy.mp4"), []byte("ftyp"), 4},
		{catalog.TagThumbnail, "THUMBNAIL", "image/jpeg", derivativeKey(t, b.task, "thumbnail", "thumbnail.jpg"), []byte{0xff, 0xd8, 0xff}, 0},
		{catalog.TagWaveform, "WAVEFORM", "image/png", derivativeKey(t, b.task, "waveform", "waveform.png"), []byte("\x89PNG"), 0},
	}
	if !hasAudio {
		steps = steps[:2]
	}
	for _, s := range steps {
		removeAfter(t, b.store, s.key)
	}
	b.fn = transcode.New(transcode.Params{Pool: b.pool, Blob: b.store, Media: newTool(t), TmpDir: t.TempDir()})
	return b, steps
}

func (b *testBundle) deliver(t *testing.T, eventID, tag string) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventPostprocess,
		task.Postprocess{TaskID: b.task.ID, AssetID: b.source, Step: tag}))
	return err
}

func (b *testBundle) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got
}

// requireStored checks that the derivative of s is recorded with the
// checksum and size of the object stored for it.
func (b *testBundle) requireStored(t *testing.T, s step) {
	t.Helper()
	d, ok := derivatives(t, b.pool, b.source)[s.kind]
	require.True(t, ok, "no %s derivative recorded", s.kind)
	require.Equal(t, b.source, d.Source)
	require.Equal(t, s.key, d.ObjectKey)
	require.Equal(t, s.contentType, d.ContentType)
	rc, obj, err := b.store.Open(t.Context(), s.key)
	require.NoError(t, err)
	body, err := io.ReadAll(rc)
	require.NoError(t, rc.Close())
	require.NoError(t, err)
	sum := sha256.Sum256(body)
	require.Equal(t, sum[:], d.SHA256, "the recorded checksum is the stored bytes'")
	require.Equal(t, int64(len(body)), d.Size)
	require.Equal(t, s.contentType, obj.ContentType)
	require.Greater(t, len(body), s.magicAt+len(s.magic))
	require.Equal(t, s.magic, body[s.magicAt:s.magicAt+len(s.magic)], "%s is not a %s", s.kind, s.contentType)
}

// requireSucceededOnce checks that the task SUCCEEDED by one transition
// that asked for one capture.
func (b *testBundle) requireSucceededOnce(t *testing.T) {
	t.Helper()
	got := b.reload(t)
	require.Equal(t, task.Succeeded, got.Status)
	require.Equal(t, b.task.Version+1, got.Version)
	require.Equal(t, 100, got.Progress)
	succeeded := 0
	for _, s := range timeline(t, b.pool, b.task.ID) {
		if s == task.Succeeded {
			succeeded++
		}
	}
	require.Equal(t, 1, succeeded, "one SUCCEEDED timeline row")
	settles := storedEvents(t, b.pool, catalog.EventSettleRequested)
	require.Len(t, settles, 1)
	var req task.SettleRequested
	require.NoError(t, json.Unmarshal(settles[0].Envelope.Payload, &req))
	require.Equal(t, task.SettleRequested{TaskID: b.task.ID, Status: task.Succeeded}, req)
}

func TestEachStepStoresItsDerivativeAndTheLastCompletes(t *testing.T) {
	t.Parallel()
	b, steps := setup(t, true)
	for i, s := range steps {
		id := uuid.NewString()
		require.NoError(t, b.deliver(t, id, s.tag), s.tag)
		b.requireStored(t, s)
		require.Len(t, derivatives(t, b.pool, b.source), i+1)
		require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupTranscode.Name, id))
		if i < len(steps)-1 {
			require.Equal(t, task.MediaProcessing, b.reload(t).Status, "%s is not the last step", s.tag)
			require.Empty(t, storedEvents(t, b.pool, catalog.EventSettleRequested))
		}
	}
	b.requireSucceededOnce(t)

	// A step delivered again after the end changes nothing.
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, catalog.TagThumbnail))
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupTranscode.Name, id))
	b.requireSucceededOnce(t)
}

func TestWithoutAudioTwoStepsComplete(t *testing.T) {
	t.Parallel()
	b, steps := setup(t, false)
	require.Len(t, steps, 2)
	for _, s := range steps {
		require.NoError(t, b.deliver(t, uuid.NewString(), s.tag), s.tag)
		b.requireStored(t, s)
	}
	b.requireSucceededOnce(t)
	require.Len(t, derivatives(t, b.pool, b.source), 2, "no waveform without audio")
}

func TestConcurrentStepsCompleteTheTaskOnce(t *testing.T) {
	t.Parallel()
	b, steps := setup(t, true)
	start := make(chan struct{})
	errs := make([]error, len(steps))
	var wg sync.WaitGroup
	for i, s := range steps {
		wg.Go(func() {
			<-start
			errs[i] = b.deliver(t, uuid.NewString(), s.tag)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, steps[i].tag)
	}
	for _, s := range steps {
		b.requireStored(t, s)
	}
	b.requireSucceededOnce(t)
}

func TestDuplicateStepIsNotMadeTwice(t *testing.T) {
	t.Parallel()
	b, steps := setup(t, true)
	proxy := steps[0]
	require.NoError(t, b.deliver(t, uuid.NewString(), proxy.tag))
	first := derivatives(t, b.pool, b.source)[proxy.kind]
	// Another event for the same step (a replay): the derivative exists.
	require.NoError(t, b.deliver(t, uuid.NewString(), proxy.tag))
	require.Equal(t, first, derivatives(t, b.pool, b.source)[proxy.kind])
	require.Len(t, derivatives(t, b.pool, b.source), 1)
	require.Equal(t, task.MediaProcessing, b.reload(t).Status)
}

func TestUnknownStepIsRefused(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, false)
	err := b.deliver(t, uuid.NewString(), catalog.TagProbe)
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	require.Empty(t, derivatives(t, b.pool, b.source))
}

// TestCanceledTooLateEndsWithOutput: a task whose cancel came after its
// provider job finished keeps its output and ends CANCELED_WITH_OUTPUT,
// settled as charged.
func TestCanceledTooLateEndsWithOutput(t *testing.T) {
	t.Parallel()
	b, steps := setup(t, false)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET cancel_requested = true WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
	for _, s := range steps {
		require.NoError(t, b.deliver(t, uuid.NewString(), s.tag), s.tag)
	}
	require.Equal(t, task.CanceledWithOut, b.reload(t).Status)
	settles := storedEvents(t, b.pool, catalog.EventSettleRequested)
	require.Len(t, settles, 1)
	var req task.SettleRequested
	require.NoError(t, json.Unmarshal(settles[0].Envelope.Payload, &req))
	require.Equal(t, task.CanceledWithOut, req.Status)
	require.True(t, req.Status.Charged())
}

// TestOptionalDerivativeFailingDoesNotHoldTheTask: ffmpeg cannot make the
// thumbnail. After OptionalTries failures the task SUCCEEDS without it,
// flagged in missing_derivatives; a later background retry that works
// stores it and clears the flag, the task staying SUCCEEDED.
func TestOptionalDerivativeFailingDoesNotHoldTheTask(t *testing.T) {
	t.Parallel()
	b, steps := setup(t, false)
	script := filepath.Join(t.TempDir(), "ffmpeg")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\ncase \"$*\" in *thumbnail*) echo 'Invalid data found when processing input' >&2; exit 1;; esac\nexec "+
		mediatest.FFmpeg(t)+" \"$@\"\n"), 0o755))
	broken := transcode.New(transcode.Params{Pool: b.pool, Blob: b.store, TmpDir: t.TempDir(),
		Media: media.New(config.Media{FFmpegPath: script, FFprobePath: mediatest.FFprobe(t)})})

	_, err := broken.Handle(t.Context(), cloudEvent(t, b.task, uuid.NewString(), catalog.EventPostprocess,
		task.Postprocess{TaskID: b.task.ID, AssetID: b.source, Step: catalog.TagTranscodeProxy}))
	require.NoError(t, err)
	thumb := uuid.NewString() // the adapter redelivers the same event
	for i := range transcode.OptionalTries {
		_, err := broken.Handle(t.Context(), cloudEvent(t, b.task, thumb, catalog.EventPostprocess,
			task.Postprocess{TaskID: b.task.ID, AssetID: b.source, Step: catalog.TagThumbnail}))
		if i < transcode.OptionalTries-1 {
			require.Equal(t, 500, statusOf(t, err), "failure %d is retried", i+1)
			require.Equal(t, task.MediaProcessing, b.reload(t).Status)
		} else {
			require.NoError(t, err, "the last failure lets the task finish")
		}
	}
	got := b.reload(t)
	require.Equal(t, task.Succeeded, got.Status)
	require.Equal(t, []string{"THUMBNAIL"}, got.MissingDerivatives)
	require.Len(t, storedEvents(t, b.pool, catalog.EventSettleRequested), 1, "charged: the video and its proxy exist")

	// The background retry, with ffmpeg working again.
	require.NoError(t, b.deliver(t, uuid.NewString(), catalog.TagThumbnail))
	b.requireStored(t, steps[1])
	got = b.reload(t)
	require.Equal(t, task.Succeeded, got.Status)
	require.Empty(t, got.MissingDerivatives)
	require.Equal(t, 1, countSucceeded(t, b))
}

func countSucceeded(t *testing.T, b *testBundle) int {
	t.Helper()
	n := 0
	for _, s := range timeline(t, b.pool, b.task.ID) {
		if s == task.Succeeded {
			n++
		}
	}
	return n
}

// TestAMissingSourceNeedsAttention: an output that is no longer in storage
// cannot be transcoded on any delivery: the task goes to NEEDS_ATTENTION
// naming the object, instead of media.proxy_failed retried delivery after
// delivery.
func TestAMissingSourceNeedsAttention(t *testing.T) {
	t.Parallel()
	b, _ := setup(t, true)
	key, err := blob.Key(b.task.TenantID.String(), b.task.ID.String(), "output", "video.mp4")
	require.NoError(t, err)
	require.NoError(t, b.store.Delete(t.Context(), key))

	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, catalog.TagTranscodeProxy), "answered: the task holds the reason")
	got := b.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "media.source_missing", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, key)
	require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupTranscode.Name, id))

	// Another step of the same task, arriving later, finds it handed over.
	require.NoError(t, b.deliver(t, uuid.NewString(), catalog.TagThumbnail))
	require.Equal(t, got, b.reload(t))
}
