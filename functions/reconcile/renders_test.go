package reconcile_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/project"
	"github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/timeline"
)

// render makes a render of a 20 s revision with its reservation, planned
// into two chunks when status is RENDERING, last changed age ago.
func (b *scanBundle) render(t *testing.T, status render.Status, age time.Duration) render.Job {
	t.Helper()
	pr, err := project.Create(t.Context(), b.pool, b.tenantID, "p")
	require.NoError(t, err)
	spec := timeline.Spec{Clips: []timeline.Clip{{AssetID: uuid.New(), OutUS: 20_000_000}}, DurationUS: 20_000_000}
	rev, _, err := project.AddRevision(t.Context(), b.pool, pr, project.FormatTimeline, json.RawMessage(`{}`), spec, project.MaxRevisions)
	require.NoError(t, err)
	key := strings.Repeat(uuid.NewString()[:2], 32)
	var j render.Job
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		j, _, err = render.Create(t.Context(), tx, render.New{TenantID: b.tenantID, RevisionID: rev.ID, SpecID: "s", Profile: "720p30-h264",
			Key: key, DurationUS: spec.DurationUS, IdempotencyKey: uuid.NewString(), RequestHash: []byte{1}})
		if err != nil {
			return err
		}
		if err := billing.ReserveRender(t.Context(), tx, b.tenantID, j.ID, 40); err != nil {
			return err
		}
		if status != render.Queued {
			windows, err := render.Plan(key, spec.DurationUS, 30, 10*time.Second)
			if err != nil {
				return err
			}
			if _, err := render.AddChunks(t.Context(), tx, b.tenantID, key, windows); err != nil {
				return err
			}
			j, err = render.Move(t.Context(), tx, j, render.Change{To: status})
			return err
		}
		return nil
	}))
	b.ageRender(t, j, age)
	return j
}

func (b *scanBundle) ageRender(t *testing.T, j render.Job, age time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE render_jobs SET updated_at = now() - $2 * interval '1 second' WHERE render_job_id = $1`, j.ID, age.Seconds())
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE render_chunks SET updated_at = now() - $2 * interval '1 second' WHERE render_key = $1`, j.Key, age.Seconds())
	require.NoError(t, err)
}

// asked lists the render steps the outbox holds for j, unpublished, and
// marks them published (the relay took them).
func (b *scanBundle) asked(t *testing.T, j render.Job) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `UPDATE outbox_events SET published_at = now()
		WHERE published_at IS NULL AND aggregate_id = $1 AND event_type = $2 RETURNING payload->>'step', coalesce(payload->>'chunk', '0')`,
		j.ID.String(), catalog.EventRenderRequested)
	require.NoError(t, err)
	var steps []string
	for rows.Next() {
		var step, chunk string
		require.NoError(t, rows.Scan(&step, &chunk))
		steps = append(steps, step+"/"+chunk)
	}
	require.NoError(t, rows.Err())
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL AND aggregate_id = $1`, j.ID.String())
	require.NoError(t, err)
	return steps
}

// maxRescues is the reconciler's: re-asks handled without progress
// before giving up.
const maxRescues = 3

// takeRenderAsks records the render stage's inbox rows for the last
// re-ask of j: the stage took it and found nothing to do.
func (b *scanBundle) takeRenderAsks(t *testing.T, j render.Job) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
		SELECT $1, e, 'STALE_NOOP', $3 FROM render_jobs, unnest(rescue_events) AS e WHERE render_job_id = $2 ON CONFLICT DO NOTHING`,
		catalog.GroupRender.Name, j.ID, make([]byte, 32))
	require.NoError(t, err)
}

// TestScanReasksRendersThatStoppedMoving: a queued render whose start was
// lost, a chunk whose delivery died (its claim ran out), and a render whose
// chunks are stored but never joined get their step again; a render whose
// re-asks reached the render stage maxRescues times without progress, and
// that has not progressed for GiveUpAfter, fails with a reason, and its
// reservation is released through settle; re-asks nobody received never
// fail it.
func TestScanReasksRendersThatStoppedMoving(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	queued := b.render(t, render.Queued, scanJourney.StuckAfter+time.Minute)
	fresh := b.render(t, render.Queued, 0)
	dying := b.render(t, render.Rendering, 0)
	_, ok, err := render.Claim(t.Context(), b.pool, b.tenantID, dying.Key, 1, time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	time.Sleep(5 * time.Millisecond)
	unjoined := b.render(t, render.Rendering, 0)
	for i := range 2 {
		l, ok, err := render.Claim(t.Context(), b.pool, b.tenantID, unjoined.Key, i, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		stored, err := l.Store(t.Context(), b.pool, render.Stored{ObjectKey: "k" + l.Token.String(), SizeBytes: 1, SHA256: make([]byte, 32)})
		require.NoError(t, err)
		require.True(t, stored)
	}
	b.ageRender(t, unjoined, scanJourney.StuckAfter+time.Minute)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 3, rep.Renders.Rescued)
	require.Equal(t, []string{"start/0"}, b.asked(t, queued))
	require.Empty(t, b.asked(t, fresh), "a render that moved lately is left alone")
	require.Equal(t, []string{"chunk/1"}, b.asked(t, dying), "only the chunk whose claim ran out: the other is on its way")
	require.Equal(t, []string{"join/0"}, b.asked(t, unjoined))

	// Re-asks nobody received (the broker down, its consumers deaf) never
	// fail the render, however long it waits.
	j := scanJourney
	j.GiveUpAfter = time.Hour
	scanner, clock := b.clocked(j)
	for range 8 {
		clock.Advance(8*j.StuckAfter + time.Minute)
		_, err := scanner.Scan(t.Context())
		require.NoError(t, err)
		b.asked(t, unjoined)
	}
	got, err := render.Get(t.Context(), b.pool, unjoined.ID)
	require.NoError(t, err)
	require.Equal(t, render.Rendering, got.Status, "undelivered re-asks are not counted")
	require.Zero(t, got.Rescues)
	require.Equal(t, 9, got.RescueAsks)

	// Re-asks the render stage took and that changed nothing: after
	// maxRescues of them, past the horizon, the render fails.
	for range maxRescues {
		b.takeRenderAsks(t, unjoined)
		clock.Advance(8*j.StuckAfter + time.Minute)
		_, err := scanner.Scan(t.Context())
		require.NoError(t, err)
		b.asked(t, unjoined)
	}
	got, err = render.Get(t.Context(), b.pool, unjoined.ID)
	require.NoError(t, err)
	require.Equal(t, render.Failed, got.Status)
	require.Equal(t, "render.stuck", got.ErrorCode)
	var settles int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2`,
		unjoined.ID.String(), catalog.EventSettleRequested).Scan(&settles))
	require.Equal(t, 1, settles, "the failure releases the reservation")

	// The settle was lost: a finished render still holding credits gets it again.
	b.ageRender(t, got, scanJourney.StuckAfter+time.Minute)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Renders.Settled)
}

// TestRenderReasksHandledAtOnceCountOnce: re-asks made during an outage
// that the render stage handles all at once, when it is back, are one
// round of evidence, not one per re-ask: the render fails only after
// maxRescues passes each found the re-ask it made last handled.
func TestRenderReasksHandledAtOnceCountOnce(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	unjoined := b.render(t, render.Rendering, 0)
	for i := range 2 {
		l, ok, err := render.Claim(t.Context(), b.pool, b.tenantID, unjoined.Key, i, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		stored, err := l.Store(t.Context(), b.pool, render.Stored{ObjectKey: "k" + l.Token.String(), SizeBytes: 1, SHA256: make([]byte, 32)})
		require.NoError(t, err)
		require.True(t, stored)
	}
	b.ageRender(t, unjoined, scanJourney.StuckAfter+time.Minute)
	j := scanJourney
	j.GiveUpAfter = time.Hour
	scanner, clock := b.clocked(j)
	scan := func() {
		t.Helper()
		clock.Advance(8*j.StuckAfter + time.Minute)
		_, err := scanner.Scan(t.Context())
		require.NoError(t, err)
		b.asked(t, unjoined)
	}
	for range 2 * maxRescues {
		scan() // nobody receives the re-asks
	}
	// The render stage is back and handles every re-ask at once.
	_, err := b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
		SELECT $1, event_id, 'STALE_NOOP', $3 FROM outbox_events WHERE aggregate_id = $2 AND event_type = $4 AND producer = 'reconcile'`,
		catalog.GroupRender.Name, unjoined.ID.String(), make([]byte, 32), catalog.EventRenderRequested)
	require.NoError(t, err)
	scan()
	got, err := render.Get(t.Context(), b.pool, unjoined.ID)
	require.NoError(t, err)
	require.Equal(t, render.Rendering, got.Status, "%d re-asks handled at once are one round", 2*maxRescues)
	for range maxRescues - 1 {
		b.takeRenderAsks(t, unjoined)
		scan()
	}
	got, err = render.Get(t.Context(), b.pool, unjoined.ID)
	require.NoError(t, err)
	require.Equal(t, render.Failed, got.Status)
	require.Equal(t, "render.stuck", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, fmt.Sprintf("re-asked %d times", maxRescues))
}
