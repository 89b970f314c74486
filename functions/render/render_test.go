package render_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/project"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/timeline"
)

// fixture is a tenant with three READY video uploads and a revision of a
// timeline of them (a dissolve and a title), and the render and settle
// functions.
type fixture struct {
	url      string // DATABASE_URL of the fixture's schema
	pool     *pgxpool.Pool
	store    *blob.Store
	tool     *media.Tool
	tenantID uuid.UUID
	revision project.Revision
	render   *stage.Function
	settle   *stage.Function
}

func newFixture(t *testing.T, p render.Params) *fixture {
	t.Helper()
	f := fixtureOf(t, p, 3*time.Second)
	require.Equal(t, int64(5_500_000), f.revision.Spec.DurationUS)
	return f
}

// fixtureOf is a fixture whose uploads last clip: the timeline is 3 clip
// - 2.5 s long.
func fixtureOf(t testing.TB, p render.Params, clip time.Duration) *fixture {
	t.Helper()
	f := &fixture{url: dbtest.TestSchemaURL(t), store: stagetest.NewStore(t), tool: stagetest.NewTool(t)}
	var err error
	f.pool, err = pgxpool.New(t.Context(), f.url)
	require.NoError(t, err)
	t.Cleanup(f.pool.Close)
	f.tenantID, _ = stagetest.NewTenant(t, f.pool)
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		_, err := billing.TopUp(t.Context(), tx, f.tenantID, 1000, "render-test")
		return err
	}))
	var ids []uuid.UUID
	for range 3 {
		path := mediatest.Clip(t, mediatest.ClipParams{Duration: clip, Width: 320, Height: 240, Rate: 30})
		a := stagetest.NewUpload(t, f.pool, f.store, f.tenantID, asset.Video, path, asset.Ready)
		probe, err := f.tool.Probe(t.Context(), path)
		require.NoError(t, err)
		require.NoError(t, asset.RecordProbe(t.Context(), f.pool, a.ID, probe))
		ids = append(ids, a.ID)
	}
	l := clip.Seconds()
	spec, err := timeline.Shorthand{
		Clips: []timeline.ShorthandClip{
			{AssetID: ids[0], In: 0, Out: l - 0.5},
			{AssetID: ids[1], In: 0, Out: l - 1, TransitionIn: &timeline.ShorthandTransition{Type: "dissolve", Duration: 1}},
			{AssetID: ids[2], In: 1, Out: l},
		},
		Titles: []timeline.ShorthandTitle{{Text: "The end", Start: 3, End: 5}},
	}.Lower(func(uuid.UUID) (timeline.Media, bool) {
		return timeline.Media{Ready: true, HasVideo: true, HasAudio: true, Duration: clip}, true
	})
	require.NoError(t, err)
	pr, err := project.Create(t.Context(), f.pool, f.tenantID, "trailer")
	require.NoError(t, err)
	source, err := json.Marshal(map[string]any{"test": true})
	require.NoError(t, err)
	f.revision, _, err = project.AddRevision(t.Context(), f.pool, pr, project.FormatTimeline, source, spec, project.MaxRevisions)
	require.NoError(t, err)

	p.Pool, p.Blob = f.pool, f.store
	if p.Media == nil {
		p.Media = f.tool
	}
	if p.TmpDir == "" {
		p.TmpDir = t.TempDir()
	}
	if p.ChunkLength == 0 {
		p.ChunkLength = 2 * time.Second // three chunks, edges inside the dissolve and the title
	}
	if p.Watch == 0 {
		p.Watch = 100 * time.Millisecond
	}
	f.render = render.New(p)
	f.settle = settle.New(settle.Params{Pool: f.pool})
	return f
}

// request makes a render of the fixture's revision as the API does: the
// job, its reservation and its start event in one transaction.
func (f *fixture) request(t testing.TB, profile string) renders.Job {
	t.Helper()
	checksums := map[uuid.UUID][]byte{}
	for _, id := range f.revision.Spec.Assets() {
		a, err := asset.Get(t.Context(), f.pool, id)
		require.NoError(t, err)
		checksums[id] = a.SHA256
	}
	key, err := renders.Key(f.revision.Spec, checksums, profile, media.EncoderVersion)
	require.NoError(t, err)
	var j renders.Job
	o := task.Origin{Producer: "test"}
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		var err error
		j, _, err = renders.Create(t.Context(), tx, renders.New{TenantID: f.tenantID, RevisionID: f.revision.ID, SpecID: "spec",
			Profile: profile, Key: key, DurationUS: f.revision.Spec.DurationUS, IdempotencyKey: uuid.NewString(), RequestHash: []byte{1}})
		if err != nil {
			return err
		}
		if err := billing.ReserveRender(t.Context(), tx, f.tenantID, j.ID, billing.DefaultRenderPrice.Of(profile, j.DurationUS)); err != nil {
			return err
		}
		start, err := j.Ask(o, task.RenderStart, 0)
		if err != nil {
			return err
		}
		return outbox.Write(t.Context(), tx, start)
	}))
	return j
}

// pending takes the outbox rows the render and settle stages consume and
// marks them published, oldest first.
func (f *fixture) pending(t testing.TB) []outbox.Stored {
	t.Helper()
	rows, err := f.pool.Query(t.Context(), `UPDATE outbox_events SET published_at = now()
		WHERE published_at IS NULL AND event_type = ANY($1) RETURNING `+outbox.Columns,
		[]string{catalog.EventRenderRequested, catalog.EventSettleRequested})
	require.NoError(t, err)
	evs, err := outbox.Scan(rows)
	require.NoError(t, err)
	return evs
}

// deliver hands one stored event to its stage, as the adapter would.
func (f *fixture) deliver(ctx context.Context, t testing.TB, ev outbox.Stored) error {
	ce, err := ev.Envelope.ToCloudEvent()
	require.NoError(t, err)
	fn := f.render
	if ev.Envelope.EventType == catalog.EventSettleRequested {
		fn = f.settle
	}
	_, err = fn.Handle(ctx, ce)
	return err
}

// drain delivers every pending event, and the ones they cause, until
// none is left.
func (f *fixture) drain(t testing.TB) {
	t.Helper()
	for range 50 {
		evs := f.pending(t)
		if len(evs) == 0 {
			return
		}
		for _, ev := range evs {
			require.NoError(t, f.deliver(t.Context(), t, ev), "deliver %s", ev.Envelope.EventType)
		}
	}
	t.Fatal("the render did not stop emitting events")
}

func (f *fixture) reservation(t testing.TB, j renders.Job) string {
	t.Helper()
	var status string
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT status FROM credit_reservations WHERE render_job_id = $1`, j.ID).Scan(&status))
	return status
}

func (f *fixture) objects(t testing.TB, j renders.Job) []string {
	t.Helper()
	prefix, err := blob.RenderKey(j.TenantID.String(), j.Key, "x")
	require.NoError(t, err)
	keys, err := f.store.List(t.Context(), strings.TrimSuffix(prefix, "x"))
	require.NoError(t, err)
	return keys
}

// TestRenderJourney: a three-clip timeline with a dissolve and a title
// renders in three chunks to one output of the expected duration (within
// a frame), size and codecs; the reservation is captured once, and the
// chunks are gone. The same content rendered again reuses the output
// without ffmpeg, and is not charged.
//
// Not parallel: it reads process-wide counters.
func TestRenderJourney(t *testing.T) {
	f := newFixture(t, render.Params{})
	j := f.request(t, "720p30-h264")
	f.drain(t)

	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, got.Status, "error: %s %s", got.ErrorCode, got.ErrorMessage)
	require.Equal(t, 100, got.Progress)
	require.False(t, got.Reused)
	require.NotNil(t, got.OutputAssetID)
	out, err := asset.Get(t.Context(), f.pool, *got.OutputAssetID)
	require.NoError(t, err)
	stagetest.RemoveAfter(t, f.store, out.ObjectKey)
	require.Equal(t, asset.KindRender, out.Kind)
	require.Equal(t, asset.Ready, out.Status)
	require.Equal(t, 1280, *out.Width)
	require.Equal(t, 720, *out.Height)
	require.Equal(t, "h264", out.VideoCodec)
	require.Equal(t, "aac", out.AudioCodec)
	require.InDelta(t, 5500, *out.DurationMS, 34, "the timeline's duration within a frame")
	url, err := f.store.PresignGet(t.Context(), out.ObjectKey, time.Minute)
	require.NoError(t, err)
	probe, err := f.tool.Probe(t.Context(), url)
	require.NoError(t, err)
	require.InDelta(t, 5.5, probe.Duration.Seconds(), 1.0/30)
	require.Equal(t, billing.Captured, f.reservation(t, j))
	var captures int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM credit_ledger WHERE ledger_business_type = 'CAPTURE'`).Scan(&captures))
	require.Equal(t, 1, captures)
	chunks, err := renders.Chunks(t.Context(), f.pool, j.TenantID, j.Key)
	require.NoError(t, err)
	require.Empty(t, chunks, "a joined render's chunks are dropped")
	require.Equal(t, []string{out.ObjectKey}, f.objects(t, j), "only the output is left under the render's prefix")
	var changes int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE event_type = $1 AND aggregate_id = $2`,
		catalog.EventTaskStateChanged, j.ID.String()).Scan(&changes))
	require.Equal(t, 2, changes, "RENDERING and SUCCEEDED reach the event stream")

	stored := mediaRuns(t, "render")
	again := f.request(t, "720p30-h264")
	f.drain(t)
	second, err := renders.Get(t.Context(), f.pool, again.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, second.Status)
	require.True(t, second.Reused)
	require.Equal(t, *got.OutputAssetID, *second.OutputAssetID)
	require.Equal(t, stored, mediaRuns(t, "render"), "no ffmpeg run for identical content")
	require.Equal(t, billing.Released, f.reservation(t, again), "an identical render is not charged")
}

// TestHeldChunkDeliveryWaitsForTheClaim: a chunk claimed by a live
// delivery is left to it: the duplicate starts no ffmpeg run and writes no
// inbox row, and it is not acknowledged: it asks to come back when the
// claim runs out. When the holder died meanwhile, that redelivery renders
// the chunk itself.
//
// Not parallel: it reads process-wide counters.
func TestHeldChunkDeliveryWaitsForTheClaim(t *testing.T) {
	f := newFixture(t, render.Params{})
	j := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // start
	}
	chunkEvents := f.pending(t)
	require.Len(t, chunkEvents, 3)
	_, ok, err := renders.Claim(t.Context(), f.pool, j.TenantID, j.Key, 0, time.Hour)
	require.NoError(t, err)
	require.True(t, ok)

	before := testutil.ToFloat64(render.DuplicateRuns())
	runs := mediaRuns(t, "render")
	err = outcome.FromResult(f.deliver(t.Context(), t, chunkEvents[0])) // as the adapter reads it
	require.Error(t, err, "not acknowledged: the event waits for the claim")
	require.False(t, outcome.IsPermanent(err))
	_, code := outcome.Of(err)
	require.Equal(t, "render.chunk_held", code)
	wait, ok := outcome.RetryAfterOf(err)
	require.True(t, ok)
	require.Greater(t, wait, 59*time.Minute, "it comes back when the hour's claim runs out")
	require.Equal(t, before+1, testutil.ToFloat64(render.DuplicateRuns()))
	require.Equal(t, runs, mediaRuns(t, "render"), "no second ffmpeg run")
	require.Empty(t, stagetest.InboxResult(t, f.pool, catalog.GroupRender.Name, chunkEvents[0].Envelope.EventID),
		"the holder's record is left to the holder")
	c, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
	require.NoError(t, err)
	require.Equal(t, renders.ChunkRendering, c.Status)

	// The holder dies: its claim runs out unrenewed.
	_, err = f.pool.Exec(t.Context(), `UPDATE render_chunks SET lease_until = now() - interval '1 second'
		WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = 0`, j.TenantID, j.Key)
	require.NoError(t, err)
	require.NoError(t, f.deliver(t.Context(), t, chunkEvents[0]), "the broker's redelivery renders the chunk")
	require.Equal(t, runs+1, mediaRuns(t, "render"))
	c, err = renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
	require.NoError(t, err)
	require.Equal(t, renders.ChunkDone, c.Status)
}

// TestKilledChunkResumes: a delivery that died mid-chunk (its claim runs
// out, nothing stored) is followed by a redelivery that claims the chunk
// again; the render ends with one output and one capture.
func TestKilledChunkResumes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, render.Params{})
	j := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	chunkEvents := f.pending(t)
	// The dead delivery's claim, already run out.
	_, ok, err := renders.Claim(t.Context(), f.pool, j.TenantID, j.Key, 1, time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(10 * time.Millisecond)
	for _, ev := range chunkEvents {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	f.drain(t)
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, got.Status, "error: %s %s", got.ErrorCode, got.ErrorMessage)
	out, err := asset.Get(t.Context(), f.pool, *got.OutputAssetID)
	require.NoError(t, err)
	stagetest.RemoveAfter(t, f.store, out.ObjectKey)
	require.Equal(t, billing.Captured, f.reservation(t, j))
	var outputs int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM assets WHERE kind = 'RENDER'`).Scan(&outputs))
	require.Equal(t, 1, outputs)
}

// TestAHangingFFmpegIsKilledAndTheRenderFails: an ffmpeg run that never
// ends (here a stand-in that sleeps) is killed at the chunk's deadline;
// the chunk fails render.chunk_timeout naming itself, is tried again as
// the broker redelivers, and once its attempts are spent the render FAILS
// render.chunk_timeout and its reservation is released: nothing hangs a
// render slot for ever.
func TestAHangingFFmpegIsKilledAndTheRenderFails(t *testing.T) {
	t.Parallel()
	hang := filepath.Join(t.TempDir(), "ffmpeg")
	require.NoError(t, os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755))
	const timeout = time.Second
	f := newFixture(t, render.Params{ChunkTimeoutMin: timeout, ChunkTimeoutFactor: 1, Media: media.New(config.Media{FFmpegPath: hang})})
	j := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	chunk := f.pending(t)
	require.Len(t, chunk, 3, "three chunks of 2 s")
	slices.SortFunc(chunk, func(a, b outbox.Stored) int {
		var pa, pb task.RenderRequested
		require.NoError(t, json.Unmarshal(a.Envelope.Payload, &pa))
		require.NoError(t, json.Unmarshal(b.Envelope.Payload, &pb))
		return pa.Chunk - pb.Chunk
	})
	// Each delivery is bounded well past the deadline, so a run that is
	// not killed fails the test instead of hanging it.
	for attempt := 1; attempt <= render.DefaultMaxChunkAttempts; attempt++ {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		started := time.Now()
		err := f.deliver(ctx, t, chunk[0])
		cancel()
		require.Error(t, err, "attempt %d", attempt)
		require.Contains(t, err.Error(), "render.chunk_timeout: chunk 0 (0s to 2s of the timeline) did not render within 2s", "attempt %d", attempt)
		require.Less(t, time.Since(started), 30*time.Second)
	}
	require.NoError(t, f.deliver(t.Context(), t, chunk[0]), "attempts spent: the render fails")
	f.drain(t)
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Failed, got.Status)
	require.Equal(t, "render.chunk_timeout", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "chunk 0 of the render could not be rendered in 4 attempts: render.chunk_timeout")
	require.Equal(t, billing.Released, f.reservation(t, j))
}

// TestAnInputRejectedMeanwhileFailsTheRender: every chunk checks its
// inputs again; one the content review rejected after the render was
// asked for (its output withheld) fails the render render.input_rejected,
// renders nothing and charges nothing.
//
// Not parallel: it reads process-wide counters.
func TestAnInputRejectedMeanwhileFailsTheRender(t *testing.T) {
	f := newFixture(t, render.Params{})
	j := f.request(t, "720p30-h264")
	input := f.revision.Spec.Assets()[1]
	// As the review stage leaves a rejected output: withheld (FAILED).
	_, err := f.pool.Exec(t.Context(), `UPDATE assets SET status = 'FAILED', error_code = $2, error_message = 'rejected' WHERE asset_id = $1`,
		input, task.ErrContentRejected)
	require.NoError(t, err)
	runs := mediaRuns(t, "render")
	f.drain(t)
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Failed, got.Status)
	require.Equal(t, "render.input_rejected", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, input.String())
	require.Equal(t, billing.Released, f.reservation(t, j))
	require.Equal(t, runs, mediaRuns(t, "render"), "no ffmpeg run")
}

// TestCancelMidChunkStopsFFmpeg: a render canceled while a chunk renders
// stops ffmpeg within a second (docs/api.md, "Cancel"; measured from the
// cancel's commit to the end of the delivery, which waits for ffmpeg to
// exit), stores nothing and leaves no asset; its reservation is released.
//
// Not parallel: it reads process-wide counters.
func TestCancelMidChunkStopsFFmpeg(t *testing.T) {
	stopped := testutil.ToFloat64(render.ChunkOutcome("stopped"))
	// One chunk, long enough to cancel in; the watch as deployed.
	f := newFixture(t, render.Params{ChunkLength: 10 * time.Second, Watch: render.DefaultWatch})
	j := f.request(t, "1080p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	chunkEvents := f.pending(t)
	require.Len(t, chunkEvents, 1)
	handled := make(chan error, 1)
	go func() { handled <- f.deliver(t.Context(), t, chunkEvents[0]) }()
	require.Eventually(t, func() bool {
		c, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
		return err == nil && c.Status == renders.ChunkRendering
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		cur, err := renders.Lock(t.Context(), tx, j.ID)
		if err != nil {
			return err
		}
		_, err = renders.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, renders.Change{To: renders.Canceled})
		return err
	}))
	canceled := time.Now()
	require.NoError(t, <-handled)
	took := time.Since(canceled)
	t.Logf("ffmpeg stopped %s after the cancel committed (watch %s)", took.Round(time.Millisecond), render.DefaultWatch)
	require.Less(t, took, time.Second, "a cancel stops the chunk's ffmpeg within a second")
	f.drain(t)
	require.Equal(t, stopped+1, testutil.ToFloat64(render.ChunkOutcome("stopped")), "ffmpeg was stopped, not left to finish the chunk")
	c, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, 0)
	require.NoError(t, err)
	require.Equal(t, renders.ChunkPending, c.Status)
	require.Empty(t, f.objects(t, j), "nothing stored")
	var outputs int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM assets WHERE kind = 'RENDER'`).Scan(&outputs))
	require.Zero(t, outputs)
	require.Equal(t, billing.Released, f.reservation(t, j))
}

// mediaRuns is how many times this process ran ffmpeg for operation.
func mediaRuns(t testing.TB, operation string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(media.Collectors()...)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != "aivedio_media_runs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tool"] == "ffmpeg" && labels["operation"] == operation {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestIdenticalRendersAtOnceRenderEachChunkOnce: two renders of the same
// content requested together share the chunks (each rendered once) and
// the output: the one that joined is charged, the other ends with its
// output, reused and free. Each chunk's event of the second render comes
// while the first render's ffmpeg renders that chunk, and is held back
// for that claim.
//
// Not parallel: it reads process-wide counters.
func TestIdenticalRendersAtOnceRenderEachChunkOnce(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "hold")
	f := newFixture(t, render.Params{Media: chunksHeldWhile(t, gate)})
	runs := mediaRuns(t, "render")
	a, b := f.request(t, "720p30-h264"), f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // both start
	}
	byChunk := map[int]map[uuid.UUID]outbox.Stored{}
	for _, ev := range f.pending(t) {
		var p task.RenderRequested
		require.NoError(t, json.Unmarshal(ev.Envelope.Payload, &p))
		require.Equal(t, task.RenderChunk, p.Step)
		if byChunk[p.Chunk] == nil {
			byChunk[p.Chunk] = map[uuid.UUID]outbox.Stored{}
		}
		byChunk[p.Chunk][uuid.MustParse(ev.Envelope.AggregateID)] = ev
	}
	require.Len(t, byChunk, 3)
	var heldBack []outbox.Stored
	for index := range 3 {
		require.Len(t, byChunk[index], 2, "chunk %d asked of both renders", index)
		require.NoError(t, os.WriteFile(gate, nil, 0o644))
		done := make(chan error, 1)
		go func() { done <- f.deliver(t.Context(), t, byChunk[index][a.ID]) }()
		require.Eventually(t, func() bool {
			c, err := renders.GetChunk(t.Context(), f.pool, a.TenantID, a.Key, index)
			return err == nil && c.Status == renders.ChunkRendering
		}, 30*time.Second, 10*time.Millisecond)
		err := outcome.FromResult(f.deliver(t.Context(), t, byChunk[index][b.ID])) // as the adapter reads it
		_, code := outcome.Of(err)
		require.Equal(t, "render.chunk_held", code, "chunk %d of the second render while the first renders it: %v", index, err)
		heldBack = append(heldBack, byChunk[index][b.ID])
		require.NoError(t, os.Remove(gate))
		require.NoError(t, <-done)
	}
	for _, ev := range heldBack { // the broker's redelivery after the claim
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	f.drain(t)
	require.Equal(t, runs+3, mediaRuns(t, "render"), "three chunks, each rendered once")
	f.requireOneCharged(t, a, b)
}

// chunksHeldWhile is the tests' ffmpeg and ffprobe, where every ffmpeg run
// but a join waits while the file gate exists (60 s at most).
func chunksHeldWhile(t *testing.T, gate string) *media.Tool {
	t.Helper()
	script := filepath.Join(t.TempDir(), "ffmpeg")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
case " $* " in
*" concat "*) ;;
*)
	i=0
	while [ -e %[1]q ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
	;;
esac
exec %[2]q "$@"
`, gate, mediatest.FFmpeg(t))), 0o755))
	return media.New(config.Media{FFmpegPath: script, FFprobePath: mediatest.FFprobe(t)})
}

// TestACanceledRenderLeavesItsChunkToASibling: two renders of the same
// content wait on one chunk; canceling the one whose delivery renders it
// does not stop ffmpeg, and the chunk serves the other, which ends
// SUCCEEDED without a second run.
//
// Not parallel: it reads process-wide counters.
func TestACanceledRenderLeavesItsChunkToASibling(t *testing.T) {
	f := newFixture(t, render.Params{ChunkLength: 10 * time.Second})
	a, b := f.request(t, "1080p30-h264"), f.request(t, "1080p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // both start
	}
	chunkEvents := f.pending(t)
	require.Len(t, chunkEvents, 2)
	runs := mediaRuns(t, "render")
	var wg sync.WaitGroup
	var handleErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		handleErr = f.deliver(t.Context(), t, chunkEvents[0])
	}()
	require.Eventually(t, func() bool {
		c, err := renders.GetChunk(t.Context(), f.pool, a.TenantID, a.Key, 0)
		return err == nil && c.Status == renders.ChunkRendering
	}, 30*time.Second, 20*time.Millisecond)
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		cur, err := renders.Lock(t.Context(), tx, a.ID)
		if err != nil {
			return err
		}
		_, err = renders.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, renders.Change{To: renders.Canceled})
		return err
	}))
	wg.Wait()
	require.NoError(t, handleErr)
	f.drain(t)
	require.Equal(t, runs+1, mediaRuns(t, "render"), "one ffmpeg run for the chunk")
	ga, err := renders.Get(t.Context(), f.pool, a.ID)
	require.NoError(t, err)
	gb, err := renders.Get(t.Context(), f.pool, b.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Canceled, ga.Status)
	require.Equal(t, renders.Succeeded, gb.Status, "%s %s", gb.ErrorCode, gb.ErrorMessage)
	out, err := asset.Get(t.Context(), f.pool, *gb.OutputAssetID)
	require.NoError(t, err)
	stagetest.RemoveAfter(t, f.store, out.ObjectKey)
	require.Equal(t, billing.Released, f.reservation(t, ga))
	require.Equal(t, billing.Captured, f.reservation(t, gb))
}

// TestAChunkGoesToNoSiblingThatEndedUnderItsLock: a chunk whose render
// was canceled while it rendered serves a sibling of the same content
// only while that sibling, as locked, is still RENDERING: a sibling
// canceled while the chunk's store waited for its lock gets neither the
// chunk nor progress, the chunk's claim goes back and its object away.
func TestAChunkGoesToNoSiblingThatEndedUnderItsLock(t *testing.T) {
	t.Parallel()
	gate := filepath.Join(t.TempDir(), "hold")
	f := newFixture(t, render.Params{ChunkLength: 10 * time.Second, Media: chunksHeldWhile(t, gate)})
	a, b := f.request(t, "720p30-h264"), f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // both start
	}
	var ofA []outbox.Stored
	for _, ev := range f.pending(t) {
		if ev.Envelope.AggregateID == a.ID.String() {
			ofA = append(ofA, ev)
		}
	}
	require.Len(t, ofA, 1, "one chunk")
	o := task.Origin{Producer: "test"}
	cancel := func(ctx context.Context, tx pgx.Tx, id uuid.UUID) (renders.Job, error) {
		cur, err := renders.Lock(ctx, tx, id)
		if err != nil {
			return renders.Job{}, err
		}
		return renders.Apply(ctx, tx, o, cur, renders.Change{To: renders.Canceled})
	}

	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	done := make(chan error, 1)
	go func() { done <- f.deliver(t.Context(), t, ofA[0]) }()
	require.Eventually(t, func() bool {
		c, err := renders.GetChunk(t.Context(), f.pool, a.TenantID, a.Key, 0)
		return err == nil && c.Status == renders.ChunkRendering
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		_, err := cancel(t.Context(), tx, a.ID)
		return err
	}))
	// b is canceled in a transaction that holds its lock from before the
	// chunk's ffmpeg run ends until the store waits for it.
	var canceled renders.Job
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		var pid int
		if err := tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			return err
		}
		var err error
		if canceled, err = cancel(t.Context(), tx, b.ID); err != nil {
			return err
		}
		if err := os.Remove(gate); err != nil {
			return err
		}
		require.Eventually(t, func() bool {
			var waits bool
			err := f.pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid)))`, pid).Scan(&waits)
			return err == nil && waits
		}, 60*time.Second, 10*time.Millisecond, "the chunk's store waits for the sibling's lock")
		return nil
	}))
	require.NoError(t, <-done)

	gb, err := renders.Get(t.Context(), f.pool, b.ID)
	require.NoError(t, err)
	require.Equal(t, [2]any{renders.Canceled, canceled.Version}, [2]any{gb.Status, gb.Version}, "no progress on a render that ended")
	c, err := renders.GetChunk(t.Context(), f.pool, a.TenantID, a.Key, 0)
	require.NoError(t, err)
	require.NotEqual(t, renders.ChunkDone, c.Status, "no chunk stored for renders that ended")
	require.NotEqual(t, renders.ChunkRendering, c.Status, "the chunk's claim went back")
	require.Empty(t, f.objects(t, a), "the chunk's object is removed")
}

// TestAnEarlierRendersFailuresAreNotCountedAgain: a chunk that used up its
// attempts in a render that failed renders again, with attempts of its
// own, for the next render of the same content.
func TestAnEarlierRendersFailuresAreNotCountedAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, render.Params{ChunkLength: 10 * time.Second})
	first := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	f.pending(t) // its chunk event is lost; its claims failed instead
	for range render.DefaultMaxChunkAttempts {
		l, ok, err := renders.Claim(t.Context(), f.pool, first.TenantID, first.Key, 0, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.NoError(t, l.Give(t.Context(), f.pool, "ffmpeg: the storage server was away"))
	}
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		cur, err := renders.Lock(t.Context(), tx, first.ID)
		if err != nil {
			return err
		}
		_, err = renders.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, renders.Change{To: renders.Failed,
			ErrorCode: "render.chunk_failed", ErrorMessage: "the storage server was away"})
		return err
	}))
	again := f.request(t, "720p30-h264")
	f.drain(t)
	got, err := renders.Get(t.Context(), f.pool, again.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
	out, err := asset.Get(t.Context(), f.pool, *got.OutputAssetID)
	require.NoError(t, err)
	stagetest.RemoveAfter(t, f.store, out.ObjectKey)
}

// TestTwoJoinsOfOneContentAtOnceChargeOne: two renders of the same
// content whose joins run at the same time (the reconciler asked both)
// both pass the check for a stored output; the one that commits second
// finds the output recorded and ends reused and free: one content, one
// charge. The joins' ffmpeg waits until both have started, so both have
// passed the check before either records its output.
//
// Not parallel: it reads process-wide counters.
func TestTwoJoinsOfOneContentAtOnceChargeOne(t *testing.T) {
	f := newFixture(t, render.Params{Media: joinsMeet(t, 2)})
	joinRuns := mediaRuns(t, "join")
	a, b := f.request(t, "720p30-h264"), f.request(t, "720p30-h264")
	isJoin := func(ev outbox.Stored) bool {
		var p task.RenderRequested
		return ev.Envelope.EventType == catalog.EventRenderRequested &&
			json.Unmarshal(ev.Envelope.Payload, &p) == nil && p.Step == task.RenderJoin
	}
	// Every chunk stored, no join run yet.
	for range 50 {
		evs := f.pending(t)
		n := 0
		for _, ev := range evs {
			if !isJoin(ev) {
				n++
				require.NoError(t, f.deliver(t.Context(), t, ev))
			}
		}
		if n == 0 {
			break
		}
	}
	// A join ask for each, as the reconciler makes for a render whose
	// chunks are all stored.
	var joins []outbox.Stored
	for _, id := range []uuid.UUID{a.ID, b.ID} {
		j, err := renders.Get(t.Context(), f.pool, id)
		require.NoError(t, err)
		require.Equal(t, renders.Rendering, j.Status)
		ev, err := j.Ask(task.Origin{Producer: "reconcile"}, task.RenderJoin, 0)
		require.NoError(t, err)
		require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error { return outbox.Write(t.Context(), tx, ev) }))
	}
	for _, ev := range f.pending(t) {
		if isJoin(ev) && (ev.Envelope.AggregateID == a.ID.String() || ev.Envelope.AggregateID == b.ID.String()) {
			joins = append(joins, ev)
		}
	}
	require.Len(t, joins, 2)
	var wg sync.WaitGroup
	for _, ev := range joins {
		wg.Go(func() { require.NoError(t, f.deliver(t.Context(), t, ev)) })
	}
	wg.Wait()
	require.Equal(t, joinRuns+2, mediaRuns(t, "join"), "both joins reached ffmpeg")
	f.drain(t)

	f.requireOneCharged(t, a, b)
}

// joinsMeet is the tests' ffmpeg and ffprobe, where a join (a concat)
// starts only once n joins have started, or after 60 s.
func joinsMeet(t *testing.T, n int) *media.Tool {
	t.Helper()
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	require.NoError(t, os.Mkdir(started, 0o755))
	script := filepath.Join(dir, "ffmpeg")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf(`#!/bin/sh
case " $* " in
*" concat "*)
	touch %[1]q/$$
	i=0
	while [ "$(ls %[1]q | wc -l)" -lt %[2]d ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
	;;
esac
exec %[3]q "$@"
`, started, n, mediatest.FFmpeg(t))), 0o755))
	return media.New(config.Media{FFmpegPath: script, FFprobePath: mediatest.FFprobe(t)})
}

// requireOneCharged: renders a and b of one content both SUCCEEDED with
// one output; one was charged, the other reused it and was released.
func (f *fixture) requireOneCharged(t *testing.T, a, b renders.Job) {
	t.Helper()
	ga, err := renders.Get(t.Context(), f.pool, a.ID)
	require.NoError(t, err)
	gb, err := renders.Get(t.Context(), f.pool, b.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, ga.Status)
	require.Equal(t, renders.Succeeded, gb.Status)
	require.Equal(t, *ga.OutputAssetID, *gb.OutputAssetID)
	out, err := asset.Get(t.Context(), f.pool, *ga.OutputAssetID)
	require.NoError(t, err)
	stagetest.RemoveAfter(t, f.store, out.ObjectKey)
	require.NotEqual(t, ga.Reused, gb.Reused, "one charged, the other reused")
	for _, j := range []renders.Job{ga, gb} {
		want := billing.Captured
		if j.Reused {
			want = billing.Released
		}
		require.Equal(t, want, f.reservation(t, j))
	}
}

// TestOutagesDoNotUseUpAChunksAttempts: a chunk whose runs fail because
// its inputs could not be read (storage refusing connections), more often
// than its attempts allow, is not failed: those attempts are not counted;
// and a claim taken over from a holder that died is not counted either.
// Only a failure of the chunk itself (its deadline, ffmpeg refusing what
// it read) spends an attempt.
func TestOutagesDoNotUseUpAChunksAttempts(t *testing.T) {
	t.Parallel()
	refused := filepath.Join(t.TempDir(), "ffmpeg")
	require.NoError(t, os.WriteFile(refused, []byte("#!/bin/sh\n"+
		"echo '[tcp @ 0x1] Connection to tcp://127.0.0.1:57070 failed: Connection refused' >&2\nexit 1\n"), 0o755))
	f := newFixture(t, render.Params{Media: media.New(config.Media{FFmpegPath: refused})})
	j := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	chunks := f.pending(t)
	require.NotEmpty(t, chunks)
	var first task.RenderRequested
	require.NoError(t, json.Unmarshal(chunks[0].Envelope.Payload, &first))
	for attempt := 1; attempt <= render.DefaultMaxChunkAttempts+2; attempt++ {
		err := f.deliver(t.Context(), t, chunks[0])
		require.Error(t, err, "attempt %d", attempt)
		require.Contains(t, err.Error(), "Connection refused", "attempt %d", attempt)
	}
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Rendering, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
	attempts := func(index int) int {
		var n int
		require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT attempts FROM render_chunks WHERE tenant_id = $1 AND render_key = $2 AND chunk_index = $3`,
			j.TenantID, j.Key, index).Scan(&n))
		return n
	}
	require.Zero(t, attempts(first.Chunk), "an outage spends no attempt")

	// Holders that die: each claim runs out, and the next delivery takes
	// the chunk over.
	other := (first.Chunk + 1) % len(chunks)
	for death := 0; death <= render.DefaultMaxChunkAttempts+1; death++ {
		var l renders.Lease
		require.Eventually(t, func() bool {
			var ok bool
			l, ok, err = renders.Claim(t.Context(), f.pool, j.TenantID, j.Key, other, time.Millisecond)
			require.NoError(t, err)
			return ok
		}, 10*time.Second, 5*time.Millisecond)
		require.Equal(t, death == 0, l.Counted, "claim %d", death)
		require.Equal(t, 1, l.Attempt, "claim %d", death)
	}
	require.Equal(t, 1, attempts(other), "a claim taken over from a dead holder is not an attempt")
}

// TestAJoinOverADamagedChunkRendersItAgain: the join reads every part
// into a local file and checks it against its chunk's checksum before
// ffmpeg sees it (ffmpeg's concat takes a part it cannot open for the end
// of the input): a part whose object is not the bytes recorded is
// rendered again, and the render succeeds instead of failing
// render.bad_output for a storage fault.
func TestAJoinOverADamagedChunkRendersItAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, render.Params{})
	j := f.request(t, "720p30-h264")
	var joins []outbox.Stored
	for range 10 {
		evs := f.pending(t)
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			var p task.RenderRequested
			require.NoError(t, json.Unmarshal(ev.Envelope.Payload, &p))
			if ev.Envelope.EventType == catalog.EventRenderRequested && p.Step == task.RenderJoin {
				joins = append(joins, ev)
				continue
			}
			require.NoError(t, f.deliver(t.Context(), t, ev))
		}
	}
	require.Len(t, joins, 1, "every chunk stored, the join asked for")
	chunks, err := renders.Chunks(t.Context(), f.pool, j.TenantID, j.Key)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(chunks), 2)
	// The last chunk's object now holds the first chunk's bytes: a valid
	// part of the wrong length, as a storage fault could leave it.
	first, _, err := f.store.Open(t.Context(), chunks[0].ObjectKey)
	require.NoError(t, err)
	_, err = f.store.Put(t.Context(), chunks[len(chunks)-1].ObjectKey, first, &blob.PutOpts{ContentType: "video/x-matroska"})
	require.NoError(t, first.Close())
	require.NoError(t, err)

	require.Error(t, f.deliver(t.Context(), t, joins[0]), "the join waits for the chunk to render again")
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Rendering, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
	again, err := renders.GetChunk(t.Context(), f.pool, j.TenantID, j.Key, chunks[len(chunks)-1].Window.Index)
	require.NoError(t, err)
	require.Equal(t, renders.ChunkPending, again.Status, "the damaged chunk renders again")
}

// TestATenantRendersAtMostItsChunksAtOnce: with RENDER_TENANT_CHUNKS 1 and
// the tenant's one slot held elsewhere (another render function rendering
// one of its chunks), every chunk delivery is acknowledged and asked again
// later on render.export.delay, none claimed and no ffmpeg run; once the
// slot is free, the chunks delivered all at once render one at a time,
// the others put off again, and the render ends with one capture and
// every slot given back.
func TestATenantRendersAtMostItsChunksAtOnce(t *testing.T) {
	t.Parallel()
	limiter := slots.New(stagetest.NewRedis(t), &slots.Opts{KeyPrefix: "test:" + uuid.NewString() + ":"})
	f := newFixture(t, render.Params{Slots: limiter, TenantChunks: 1})
	j := f.request(t, "720p30-h264")
	for _, ev := range f.pending(t) {
		require.NoError(t, f.deliver(t.Context(), t, ev)) // start: three chunks
	}
	chunkEvents := f.pending(t)
	require.Len(t, chunkEvents, 3)

	scope := "render-tenant:" + f.tenantID.String()
	elsewhere, err := limiter.Acquire(t.Context(), slots.AcquireParams{Scopes: []slots.Scope{{Name: scope, Limit: 1}}, Holder: "another-render", TTL: time.Minute})
	require.NoError(t, err)
	for _, ev := range chunkEvents {
		require.NoError(t, f.deliver(t.Context(), t, ev), "a chunk that waits for a slot is acknowledged")
	}
	c, err := renders.Chunks(t.Context(), f.pool, j.TenantID, j.Key)
	require.NoError(t, err)
	for _, ch := range c {
		require.Equal(t, renders.ChunkPending, ch.Status, "chunk %d claimed without a slot", ch.Window.Index)
	}
	later := f.pending(t)
	require.Len(t, later, 3, "each chunk asked again")
	for _, ev := range later {
		require.Equal(t, catalog.RenderExportDelay.Name, ev.Topic.Name)
		require.True(t, ev.DeliverAt.After(time.Now()), "due later: %s", ev.DeliverAt)
		var p task.RenderRequested
		require.NoError(t, json.Unmarshal(ev.Envelope.Payload, &p))
		require.Equal(t, 1, p.SlotWaits)
	}
	require.NoError(t, limiter.Release(t.Context(), elsewhere))

	// All at once: one claims the slot and renders, the others that came
	// while it rendered wait again; never two chunks rendering at once.
	maxBusy := make(chan int)
	watch, stop := context.WithCancel(t.Context())
	go func() {
		most := 0
		for watch.Err() == nil {
			var busy int
			if err := f.pool.QueryRow(watch, `SELECT count(*) FROM render_chunks WHERE tenant_id = $1 AND status = 'RENDERING'`, f.tenantID).Scan(&busy); err == nil {
				most = max(most, busy)
			}
			time.Sleep(5 * time.Millisecond) // a sampling interval, not a wait for a condition
		}
		maxBusy <- most
	}()
	var wg sync.WaitGroup
	for _, ev := range later {
		wg.Go(func() { require.NoError(t, f.deliver(t.Context(), t, ev)) })
	}
	wg.Wait()
	stop()
	require.Equal(t, 1, <-maxBusy, "one chunk of the tenant rendering at a time")
	c, err = renders.Chunks(t.Context(), f.pool, j.TenantID, j.Key)
	require.NoError(t, err)
	var done int
	for _, ch := range c {
		if ch.Status == renders.ChunkDone {
			done++
		}
	}
	again := f.pending(t)
	t.Logf("delivered at once: %d rendered, %d put off again", done, len(again))
	require.Positive(t, done)
	require.Len(t, again, 3-done, "each chunk not rendered was put off again")
	inUse, err := limiter.InUse(t.Context(), scope)
	require.NoError(t, err)
	require.Zero(t, inUse, "a rendered chunk gives its slot back")
	for _, ev := range again {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	f.drain(t)
	got, err := renders.Get(t.Context(), f.pool, j.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
	require.Equal(t, billing.Captured, f.reservation(t, j))
	inUse, err = limiter.InUse(t.Context(), scope)
	require.NoError(t, err)
	require.Zero(t, inUse)
}

// TestACanceledJoinChargesTheRenderThatTakesItsOutput: of two renders of
// the same content, the one whose join runs is canceled inside the join's
// window (ffmpeg concatenating). Its join still records the output for
// the other, which waited on the same chunks; that one takes it and is
// charged. One content rendered, one capture: the canceled render is
// released, and no render ends reused from an output nobody paid for.
func TestACanceledJoinChargesTheRenderThatTakesItsOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	joining, proceed := filepath.Join(dir, "joining"), filepath.Join(dir, "proceed")
	wrapper := filepath.Join(dir, "ffmpeg")
	// The join's ffmpeg run (-f concat) says it started and waits for the
	// test before it runs; every other run is ffmpeg itself.
	script := fmt.Sprintf("#!/bin/sh\ncase \" $* \" in *\" concat \"*) : > %q\n  i=0; while [ ! -e %q ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done;;\nesac\nexec %q \"$@\"\n",
		joining, proceed, mediatest.FFmpeg(t))
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	f := newFixture(t, render.Params{Media: media.New(config.Media{FFmpegPath: wrapper, FFprobePath: mediatest.FFprobe(t)})})
	a, b := f.request(t, "720p30-h264"), f.request(t, "720p30-h264")
	isJoin := func(ev outbox.Stored) bool {
		var p task.RenderRequested
		return json.Unmarshal(ev.Envelope.Payload, &p) == nil && p.Step == task.RenderJoin
	}
	// Every chunk stored, no join run yet.
	var joins []outbox.Stored
	for range 50 {
		evs := f.pending(t)
		if len(evs) == 0 {
			break
		}
		for _, ev := range evs {
			if isJoin(ev) {
				joins = append(joins, ev)
				continue
			}
			require.NoError(t, f.deliver(t.Context(), t, ev))
		}
	}
	require.NotEmpty(t, joins, "the chunk that completed the set asked for a join")
	joiner := joins[0]
	canceled := a
	if joiner.Envelope.AggregateID == b.ID.String() {
		canceled = b
	}
	joined := make(chan error, 1)
	go func() { joined <- f.deliver(t.Context(), t, joiner) }()
	require.Eventually(t, func() bool {
		_, err := os.Stat(joining)
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the join's ffmpeg run started")
	require.NoError(t, pgx.BeginFunc(t.Context(), f.pool, func(tx pgx.Tx) error {
		cur, err := renders.Lock(t.Context(), tx, canceled.ID)
		if err != nil {
			return err
		}
		_, err = renders.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, renders.Change{To: renders.Canceled})
		return err
	}))
	require.NoError(t, os.WriteFile(proceed, nil, 0o644))
	require.NoError(t, <-joined)
	for _, ev := range joins[1:] {
		require.NoError(t, f.deliver(t.Context(), t, ev))
	}
	f.drain(t)

	other := a
	if canceled.ID == a.ID {
		other = b
	}
	gc, err := renders.Get(t.Context(), f.pool, canceled.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Canceled, gc.Status)
	require.Equal(t, billing.Released, f.reservation(t, canceled))
	got, err := renders.Get(t.Context(), f.pool, other.ID)
	require.NoError(t, err)
	require.Equal(t, renders.Succeeded, got.Status, "%s %s", got.ErrorCode, got.ErrorMessage)
	require.NotNil(t, got.OutputAssetID)
	require.Equal(t, billing.Captured, f.reservation(t, other), "the render that took the output recorded for it pays for it")
	var captures, outputs int
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM credit_ledger WHERE ledger_business_type = 'CAPTURE'`).Scan(&captures))
	require.NoError(t, f.pool.QueryRow(t.Context(), `SELECT count(*) FROM assets WHERE kind = 'RENDER'`).Scan(&outputs))
	require.Equal(t, 1, captures, "one content rendered, one capture")
	require.Equal(t, 1, outputs)
}
