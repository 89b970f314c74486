package reconcile_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// repairRow is one reconcile_repairs row, as the tests read it.
type repairRow struct {
	Kind          string
	AggregateType string
	Reason        string
	Rescue        bool
	TaskVersion   *int64
}

// repairsOf lists the audit rows of one aggregate, oldest first.
func (b *scanBundle) repairsOf(t *testing.T, aggregateID string) []repairRow {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT repair, aggregate_type, reason, rescue, task_version FROM reconcile_repairs
		WHERE aggregate_id = $1 ORDER BY repair_id`, aggregateID)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[repairRow])
	require.NoError(t, err)
	return got
}

func kinds(rs []repairRow) []string {
	var ks []string
	for _, r := range rs {
		ks = append(ks, r.Kind)
	}
	return ks
}

// TestEveryRepairWritesItsAuditRow: whatever the scan repairs, an operator
// finds a reconcile_repairs row saying what was done to which aggregate
// and why; rescues are marked as such.
func TestEveryRepairWritesItsAuditRow(t *testing.T) {
	t.Parallel()

	t.Run("task rescue", func(t *testing.T) {
		t.Parallel()
		b := scanSetup(t)
		stuck := b.stuckTask(t, task.Queued, 5*time.Minute)
		_, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		got := b.repairsOf(t, stuck.ID.String())
		require.Len(t, got, 1)
		require.Equal(t, reconcile.RepairTaskRescue, got[0].Kind)
		require.Equal(t, task.AggregateType, got[0].AggregateType)
		require.True(t, got[0].Rescue)
		require.NotNil(t, got[0].TaskVersion)
		require.Equal(t, b.reloadTask(t, stuck.ID).Version, *got[0].TaskVersion, "names the timeline row of the touch")
		require.Contains(t, got[0].Reason, "reconcile: re-emitted")
	})

	t.Run("task handed to a person", func(t *testing.T) {
		t.Parallel()
		b := scanSetup(t)
		orphan := b.stuckTask(t, task.ProviderRunning, time.Hour)
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', provider_job_id = 'job-nobody-recorded' WHERE task_id = $1`, orphan.ID)
		require.NoError(t, err)
		_, err = b.scanner.Scan(t.Context())
		require.NoError(t, err)
		got := b.repairsOf(t, orphan.ID.String())
		require.Equal(t, []string{reconcile.RepairTaskGiveUp}, kinds(got))
		require.False(t, got[0].Rescue)
		require.Contains(t, got[0].Reason, "reconcile.attempt_missing")
	})

	t.Run("re-settle", func(t *testing.T) {
		t.Parallel()
		b := scanSetup(t)
		done := b.stuckTask(t, task.Succeeded, 10*time.Minute)
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, rep.Settled)
		got := b.repairsOf(t, done.ID.String())
		require.Equal(t, []string{reconcile.RepairTaskResettle}, kinds(got))
		require.Contains(t, got[0].Reason, "SUCCEEDED")
	})

	t.Run("derivative retry", func(t *testing.T) {
		t.Parallel()
		b := scanSetup(t)
		done := b.stuckTask(t, task.Succeeded, time.Hour)
		_, err := b.pool.Exec(t.Context(), `INSERT INTO assets (asset_id, tenant_id, task_id, kind, object_key, checksum_sha256, size_bytes, content_type)
			VALUES ($1, $2, $3::uuid, 'SOURCE', $3::uuid::text || '/out', $4, 1, 'video/mp4')`, uuid.New(), b.tenantID, done.ID, make([]byte, 32))
		require.NoError(t, err)
		_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET missing_derivatives = '{THUMBNAIL}', updated_at = now() - interval '1 hour' WHERE task_id = $1`, done.ID)
		require.NoError(t, err)
		_, err = b.pool.Exec(t.Context(), `UPDATE credit_reservations SET status = 'CAPTURED', settled_at = now() WHERE task_id = $1`, done.ID)
		require.NoError(t, err)
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, rep.DerivativesRetried)
		got := b.repairsOf(t, done.ID.String())
		require.Equal(t, []string{reconcile.RepairDerivativeRetry}, kinds(got))
		require.Contains(t, got[0].Reason, "THUMBNAIL")
	})

	t.Run("slot rebuild", func(t *testing.T) {
		t.Parallel()
		b := scanSetup(t)
		limiter := testLimiter(t)
		scanner := reconcile.NewScanner(reconcile.Params{Pool: b.pool, Slots: limiter, Journey: scanJourney, Timeout: 10 * time.Second})
		b.stuckTask(t, task.ProviderRunning, 0)
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', next_poll_at = now() + interval '1 hour'`)
		require.NoError(t, err)
		rep, err := scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 3, rep.SlotScopesRebuilt)
		got := b.repairsOf(t, "tenant:"+b.tenantID.String())
		require.Equal(t, []string{reconcile.RepairSlotsRebuild}, kinds(got))
		require.Contains(t, got[0].Reason, "1 tasks in flight")
	})

	t.Run("upload expired and rescued", func(t *testing.T) {
		t.Parallel()
		b := scanSetup(t)
		store := stagetest.NewStore(t)
		file := filepath.Join(t.TempDir(), "clip.mp4")
		require.NoError(t, os.WriteFile(file, []byte("bytes"), 0o600))
		abandoned := stagetest.NewUpload(t, b.pool, store, b.tenantID, asset.Video, file, asset.PendingUpload)
		lost := stagetest.NewUpload(t, b.pool, store, b.tenantID, asset.Video, file, asset.Processing)
		_, err := b.pool.Exec(t.Context(), `UPDATE assets SET updated_at = now() - interval '1 day' WHERE asset_id = ANY($1)`,
			[]uuid.UUID{abandoned.ID, lost.ID})
		require.NoError(t, err)
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Equal(t, 1, rep.Uploads.Expired)
		require.Equal(t, 1, rep.Uploads.Rescued)
		require.Equal(t, []string{reconcile.RepairUploadExpire}, kinds(b.repairsOf(t, abandoned.ID.String())))
		got := b.repairsOf(t, lost.ID.String())
		require.Equal(t, []string{reconcile.RepairUploadRescue}, kinds(got))
		require.True(t, got[0].Rescue)
	})
}

// TestRescuesAreCountedFromTheirAuditRows: the rounds without progress a
// task has had are its rescue rows, so each rescue adds exactly one, and a
// task with maxRescues of them taken goes to a person.
func TestRescuesAreCountedFromTheirAuditRows(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Queued, time.Hour)
	rescues := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM reconcile_repairs WHERE aggregate_id = $1 AND rescue`,
			stuck.ID.String()).Scan(&n))
		return n
	}
	for i := range maxRescues + 1 {
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		if i < maxRescues {
			require.Equal(t, 1, rep.Rescued[task.Queued], "round %d", i)
			require.Equal(t, i+1, rescues(), "round %d: one rescue row per rescue", i)
		} else {
			require.Equal(t, 1, rep.NeedsAttention, "round %d: maxRescues rescue rows taken", i)
		}
		b.age(t, stuck.ID)
	}
	got := b.reloadTask(t, stuck.ID)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Contains(t, got.ErrorMessage, "3 times")

	// Rows a rescue did not write are not rescues, whatever their text.
	b2 := scanSetup(t)
	other := b2.stuckTask(t, task.Queued, time.Hour)
	for range maxRescues + 2 {
		_, err := b2.pool.Exec(t.Context(), `DELETE FROM reconcile_repairs WHERE aggregate_id = $1`, other.ID.String())
		require.NoError(t, err)
		rep, err := b2.scanner.Scan(t.Context())
		require.NoError(t, err)
		require.Zero(t, rep.NeedsAttention, "without rescue rows no round counts")
		b2.age(t, other.ID)
	}
}

// TestEachPassIsBounded: a backlog larger than a service's batch is worked
// off over several passes.
func TestEachPassIsBounded(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	for range 3 {
		b.stuckTask(t, task.Queued, 5*time.Minute)
		b.stuckTask(t, task.Succeeded, 10*time.Minute)
	}
	scanner := reconcile.NewScanner(reconcile.Params{Pool: b.pool, Journey: scanJourney, Timeout: 10 * time.Second,
		Maintenance: reconcile.MaintenanceConfig{Tasks: reconcile.TaskRescuerConfig{Batch: 2}, Resettle: reconcile.ResettlerConfig{Batch: 2}}})
	rep, err := scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, rep.Rescued[task.Queued])
	require.Equal(t, 2, rep.Settled)
	rep, err = scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued], "a rescue touches its task: the rest on the next pass")
	require.Equal(t, 1, rep.Settled, "the settles asked are on their way: the rest on the next pass")
}

// TestASettleIsAskedAgainOncePerStuckAfter: a settle asked again is not
// asked again while an event of its task waits in the outbox, nor within
// RECONCILE_STUCK_AFTER of the last ask; then it is.
func TestASettleIsAskedAgainOncePerStuckAfter(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	done := b.stuckTask(t, task.Succeeded, 10*time.Minute)
	now := time.Now()
	s := reconcile.NewResettler(reconcile.Params{Pool: b.pool, Journey: scanJourney, Now: func() time.Time { return now }})
	pass := func() int {
		n, err := s.RunOnce(t.Context())
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 1, pass())
	require.Zero(t, pass(), "its settle event is still in the outbox")
	_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now()`)
	require.NoError(t, err)
	require.Zero(t, pass(), "asked within RECONCILE_STUCK_AFTER of the last ask")
	now = now.Add(scanJourney.StuckAfter + time.Minute)
	require.Equal(t, 1, pass())
	require.Equal(t, []string{reconcile.RepairTaskResettle, reconcile.RepairTaskResettle}, kinds(b.repairsOf(t, done.ID.String())))
}

// TestSlotRebuildsAreBoundedAndRotate: past its batch, the slot rebuilder
// carries on where it stopped, so every scope is rebuilt within a few
// passes.
func TestSlotRebuildsAreBoundedAndRotate(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	limiter := testLimiter(t)
	s := reconcile.NewSlotRebuilder(reconcile.Params{Pool: b.pool, Slots: limiter, Journey: scanJourney,
		Maintenance: reconcile.MaintenanceConfig{Slots: reconcile.SlotRebuilderConfig{Batch: 2}}})
	b.stuckTask(t, task.ProviderRunning, 0)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim'`)
	require.NoError(t, err)
	scopes := func() []string {
		rows, err := b.pool.Query(t.Context(), `SELECT aggregate_id FROM reconcile_repairs WHERE repair = $1 ORDER BY repair_id`, reconcile.RepairSlotsRebuild)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return got
	}
	n, err := s.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	n, err = s.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got := scopes()
	require.Len(t, got, 4)
	require.ElementsMatch(t, []string{"model:m", "provider:sim", "tenant:" + b.tenantID.String()}, unique(got[:3]), "three passes' worth in two: every scope once")
	require.Equal(t, got[0], got[3], "the second pass wrapped round to the first scope")
}

// TestRunSignalsEachPass: a service's Run makes a pass at once and tells a
// test that armed its signals, so the test waits on that, not on time.
func TestRunSignalsEachPass(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	done := b.stuckTask(t, task.Succeeded, 10*time.Minute)
	s := reconcile.NewResettler(reconcile.Params{Pool: b.pool, Journey: scanJourney, Maintenance: reconcile.MaintenanceConfig{
		Resettle: reconcile.ResettlerConfig{Interval: time.Hour}}})
	s.TestSignals.Init()
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan error, 1)
	go func() { stopped <- s.Run(ctx) }()
	require.NoError(t, s.TestSignals.Pass.Wait(t))
	require.Equal(t, []string{reconcile.RepairTaskResettle}, kinds(b.repairsOf(t, done.ID.String())))
	cancel()
	require.ErrorIs(t, <-stopped, context.Canceled)
}

func testLimiter(t *testing.T) *slots.Limiter {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return slots.New(rdb, &slots.Opts{KeyPrefix: "test:" + uuid.NewString() + ":"})
}

func unique(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
