package task_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

type testBundle struct {
	pool     *pgxpool.Pool
	tenantID uuid.UUID
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.TestSchema(t)
	var created tenant.Created
	inTx(t, pool, func(tx pgx.Tx) error {
		var err error
		created, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "acme", Credits: 1000}, tenant.RoleTenant)
		return err
	})
	return &testBundle{pool: pool, tenantID: created.TenantID}
}

func inTx(t *testing.T, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, fn))
}

var api = task.Origin{Producer: "api"}

// newTask creates a task under key and returns it.
func (b *testBundle) newTask(t *testing.T, key string) task.Task {
	t.Helper()
	var created task.Task
	inTx(t, b.pool, func(tx pgx.Tx) error {
		var err error
		created, _, err = task.Create(t.Context(), tx, api, b.request(key, "a cat"))
		return err
	})
	return created
}

func (b *testBundle) request(key, prompt string) task.New {
	hash := sha256.Sum256([]byte(prompt))
	return task.New{TenantID: b.tenantID, IdempotencyKey: key, RequestHash: hash[:], Model: "m1",
		Prompt: prompt, DurationSeconds: 4, Resolution: "1280x720"}
}

func TestCreateIsIdempotentPerKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.newTask(t, "k1")
	require.Equal(t, task.Queued, first.Status)
	require.EqualValues(t, 1, first.Version)

	inTx(t, b.pool, func(tx pgx.Tx) error {
		again, created, err := task.Create(t.Context(), tx, api, b.request("k1", "a cat"))
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, first.ID, again.ID)

		_, _, err = task.Create(t.Context(), tx, api, b.request("k1", "a dog"))
		require.ErrorIs(t, err, task.ErrIdempotencyConflict)
		return nil
	})
	requireTimeline(t, b.pool, first.ID, []task.Status{task.Queued})
	require.Equal(t, 1, countRows(t, b.pool, `SELECT count(*) FROM outbox_events WHERE event_type = $1`, catalog.EventTaskStateChanged))
}

func TestApplyMovesVersionAndRecordsEverything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.newTask(t, "k1")

	origin := task.Origin{Producer: "submit", EventID: uuid.NewString(), CorrelationID: cur.ID.String()}
	var next task.Task
	inTx(t, b.pool, func(tx pgx.Tx) error {
		var err error
		next, err = task.Apply(t.Context(), tx, origin, cur, task.Transition{
			To: task.Submitting, Reason: "submit started",
			Set: task.Fields{Provider: task.Ptr("sim")},
		})
		return err
	})
	require.Equal(t, task.Submitting, next.Status)
	require.EqualValues(t, 2, next.Version)
	require.Equal(t, "sim", next.Provider)
	requireTimeline(t, b.pool, cur.ID, []task.Status{task.Queued, task.Submitting})

	var group, causation string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT message_group, causation_id::text FROM outbox_events
		WHERE event_type = $1 ORDER BY created_at DESC, event_id DESC LIMIT 1`, catalog.EventTaskStateChanged).Scan(&group, &causation))
	require.Equal(t, cur.ID.String(), group, "state changes are FIFO per task")
	require.Equal(t, origin.EventID, causation)
}

func TestApplyWithAnOldVersionIsStale(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.newTask(t, "k1")
	inTx(t, b.pool, func(tx pgx.Tx) error {
		_, err := task.Apply(t.Context(), tx, api, cur, task.Transition{To: task.Submitting})
		return err
	})
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		_, err := task.Apply(t.Context(), tx, api, cur, task.Transition{To: task.Canceled})
		return err
	})
	require.ErrorIs(t, err, task.ErrStale)
	requireTimeline(t, b.pool, cur.ID, []task.Status{task.Queued, task.Submitting})
}

func TestApplyRefusesIllegalMovesWithoutWriting(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.newTask(t, "k1")
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		_, err := task.Apply(t.Context(), tx, api, cur, task.Transition{To: task.Succeeded})
		return err
	})
	require.ErrorIs(t, err, task.ErrIllegalTransition)
	requireTimeline(t, b.pool, cur.ID, []task.Status{task.Queued})
}

// TestConcurrentTransitionsOneWins races two deliveries that both read the
// same version: exactly one commits its move.
func TestConcurrentTransitionsOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.newTask(t, "k1")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, to := range []task.Status{task.Submitting, task.Canceled} {
		wg.Go(func() {
			errs[i] = pgx.BeginFunc(context.WithoutCancel(t.Context()), b.pool, func(tx pgx.Tx) error {
				_, err := task.Apply(t.Context(), tx, api, cur, task.Transition{To: to})
				return err
			})
		})
	}
	wg.Wait()
	stale := 0
	for _, err := range errs {
		if errors.Is(err, task.ErrStale) {
			stale++
		} else {
			require.NoError(t, err)
		}
	}
	require.Equal(t, 1, stale)
	require.Equal(t, 2, countRows(t, b.pool, `SELECT count(*) FROM task_events WHERE task_id = $1`, cur.ID))
}

func TestGetForTenantHidesOtherTenantsTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cur := b.newTask(t, "k1")
	_, err := task.GetForTenant(t.Context(), b.pool, uuid.New(), cur.ID)
	require.ErrorIs(t, err, task.ErrNotFound)
	got, err := task.GetForTenant(t.Context(), b.pool, b.tenantID, cur.ID)
	require.NoError(t, err)
	require.Equal(t, cur.ID, got.ID)
}

func requireTimeline(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, want []task.Status) {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT to_status FROM task_events WHERE task_id = $1 ORDER BY version`, id)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowTo[task.Status])
	require.NoError(t, err)
	require.Equal(t, want, got)
}

func countRows(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}
