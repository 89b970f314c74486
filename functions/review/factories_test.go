package review_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/review"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/transcode"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	reviews "github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

var (
	cloudEvent   = stagetest.CloudEvent
	storedEvents = stagetest.StoredEvents
	inboxResult  = stagetest.InboxResult
	newStore     = stagetest.NewStore
	removeAfter  = stagetest.RemoveAfter
	newTool      = stagetest.NewTool
)

const reserved = 20

// processingTask is a task holding a reservation whose output was
// fetched: MEDIA_PROCESSING through the state machine.
func processingTask(t *testing.T, pool *pgxpool.Pool) task.Task {
	t.Helper()
	return stagetest.NewTask(t, pool, &stagetest.TaskOpts{Reserved: reserved},
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("fake")}},
		task.Transition{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr("job-1")}},
		task.Transition{To: task.Fetching, Set: task.Fields{Progress: task.Ptr(100)}},
		task.Transition{To: task.MediaProcessing})
}

// storeProbedOutput stores the clip at path as tk's output and records it
// as the probe leaves it (without audio: two derivatives to make).
func storeProbedOutput(t *testing.T, pool *pgxpool.Pool, store *blob.Store, tk task.Task, path string) uuid.UUID {
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
	id := uuid.Must(uuid.NewV7())
	_, err = pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type,
			duration_ms, width, height, video_codec, probe)
		VALUES ($1, $2, $3, 'SOURCE', $4, $5, $6, 'video/mp4', 2000, 160, 120, 'h264', '{}')`,
		id, tk.TenantID, tk.ID, key, sum, obj.Size)
	require.NoError(t, err)
	return id
}

// world is one MEDIA_PROCESSING task whose review is required, with the
// review and transcode stages and a reviewer simulator.
type world struct {
	pool      *pgxpool.Pool
	store     *blob.Store
	sim       *reviewsim.Server
	cfg       config.Review
	review    *stage.Function
	transcode *stage.Function
	task      task.Task
	source    uuid.UUID
}

func testConfig(url, secret string) config.Review {
	return config.Review{URL: url, Secret: secret, Timeout: 5 * time.Second, MaxWait: 30 * time.Minute,
		Base: 5 * time.Second, Most: time.Minute, Frames: 3, URLTTL: 10 * time.Minute}
}

// startSim starts a reviewer simulator on a loopback port for the test.
func startSim(t *testing.T, o reviewsim.Options) *reviewsim.Server {
	t.Helper()
	sim, err := reviewsim.New(o, nil)
	require.NoError(t, err)
	_, err = sim.Start(t.Context(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{pool: dbtest.TestSchema(t), store: newStore(t)}
	w.sim = startSim(t, reviewsim.DefaultOptions())
	w.cfg = testConfig(w.sim.URL(), w.sim.Secret())
	w.task = processingTask(t, w.pool)
	path := mediatest.Clip(t, mediatest.ClipParams{Duration: 2 * time.Second, Width: 160, Height: 120, Rate: 10, NoAudio: true})
	w.source = storeProbedOutput(t, w.pool, w.store, w.task, path)
	for i := range w.cfg.Frames {
		key, err := review.FrameKey(w.task, i)
		require.NoError(t, err)
		removeAfter(t, w.store, key)
	}
	for _, kind := range []string{"proxy/proxy.mp4", "thumbnail/thumbnail.jpg"} {
		removeAfter(t, w.store, "tenants/"+w.task.TenantID.String()+"/tasks/"+w.task.ID.String()+"/"+kind)
	}
	require.NoError(t, reviews.Require(t.Context(), w.pool, w.task.ID, w.task.TenantID, w.source))
	w.review = review.New(review.Params{Pool: w.pool, Blob: w.store, Media: newTool(t), Config: w.cfg, TmpDir: t.TempDir(),
		Rand: func() float64 { return 0.5 }})
	w.transcode = transcode.New(transcode.Params{Pool: w.pool, Blob: w.store, Media: newTool(t), TmpDir: t.TempDir()})
	return w
}

// deliverReview hands the review stage a REVIEW of the task's chain at
// attempt.
func (w *world) deliverReview(t *testing.T, eventID string, attempt int) error {
	t.Helper()
	_, err := w.review.Handle(t.Context(), cloudEvent(t, w.task, eventID, catalog.EventPostprocess,
		task.Postprocess{TaskID: w.task.ID, AssetID: w.source, Step: catalog.TagReview, Wait: task.Wait{RetryAttempt: attempt}}))
	return err
}

// deliverDerivatives makes every derivative the task needs.
func (w *world) deliverDerivatives(t *testing.T) {
	t.Helper()
	for _, step := range stage.DerivativeSteps(false) {
		_, err := w.transcode.Handle(t.Context(), cloudEvent(t, w.task, uuid.NewString(), catalog.EventPostprocess,
			task.Postprocess{TaskID: w.task.ID, AssetID: w.source, Step: step}))
		require.NoError(t, err, step)
	}
}

func (w *world) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), w.pool, w.task.ID)
	require.NoError(t, err)
	return got
}

func (w *world) reviewRow(t *testing.T) reviews.Review {
	t.Helper()
	r, err := reviews.Get(t.Context(), w.pool, w.task.ID)
	require.NoError(t, err)
	return r
}

// settles are the settle events the task's transitions asked for.
func (w *world) settles(t *testing.T) []task.SettleRequested {
	t.Helper()
	var out []task.SettleRequested
	for _, e := range storedEvents(t, w.pool, catalog.EventSettleRequested) {
		var p task.SettleRequested
		require.NoError(t, json.Unmarshal(e.Envelope.Payload, &p))
		if p.TaskID == w.task.ID {
			out = append(out, p)
		}
	}
	return out
}

// delayedReviews are the delayed REVIEW events written for the task.
func (w *world) delayedReviews(t *testing.T) []delayed {
	t.Helper()
	var out []delayed
	for _, e := range storedEvents(t, w.pool, catalog.EventPostprocess) {
		var p task.Postprocess
		require.NoError(t, json.Unmarshal(e.Envelope.Payload, &p))
		if p.Step == catalog.TagReview && e.Topic.Name == catalog.AssetPostprocessDelay.Name {
			out = append(out, delayed{p, e.DeliverAt})
		}
	}
	return out
}

type delayed struct {
	task.Postprocess
	at time.Time
}

func ctx(t *testing.T) context.Context { return t.Context() }
