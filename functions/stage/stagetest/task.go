package stagetest

import (
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

// Credits is the starting balance of the tenant [NewTask] creates.
const Credits = 100

// TaskOpts are the optional knobs of [NewTask].
type TaskOpts struct {
	// Reserved is what the task's credit reservation holds; zero: the task
	// holds no reservation.
	Reserved int64
}

// NewTask creates a tenant with [Credits] and a QUEUED task of it, and
// moves the task along path through the state machine, as the stages
// would, all in one transaction. It returns the task as the last
// transition left it.
func NewTask(t *testing.T, pool *pgxpool.Pool, opts *TaskOpts, path ...task.Transition) task.Task {
	t.Helper()
	if opts == nil {
		opts = &TaskOpts{}
	}
	ctx := t.Context()
	o := task.Origin{Producer: "test"}
	var cur task.Task
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		c, err := tenant.Create(ctx, tx, tenant.NewTenant{Name: "acme", Credits: Credits}, tenant.RoleTenant)
		if err != nil {
			return err
		}
		hash := sha256.Sum256([]byte("request"))
		cur, _, err = task.Create(ctx, tx, o, task.New{TenantID: c.TenantID, IdempotencyKey: "k", RequestHash: hash[:],
			Model: "m", Prompt: "a cat", DurationSeconds: 2, Resolution: "640x360"})
		if err != nil {
			return err
		}
		if opts.Reserved > 0 {
			if err := billing.Reserve(ctx, tx, c.TenantID, cur.ID, opts.Reserved); err != nil {
				return err
			}
		}
		for _, tr := range path {
			if cur, err = task.Apply(ctx, tx, o, cur, tr); err != nil {
				return err
			}
		}
		return nil
	}))
	return cur
}

// Advance moves task id on through the state machine, as the stages would,
// in one transaction: what makes an event about its earlier state stale.
func Advance(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, path ...task.Transition) task.Task {
	t.Helper()
	var cur task.Task
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		if cur, err = task.Lock(t.Context(), tx, id); err != nil {
			return err
		}
		for _, tr := range path {
			if cur, err = task.Apply(t.Context(), tx, task.Origin{Producer: "test"}, cur, tr); err != nil {
				return err
			}
		}
		return nil
	}))
	return cur
}
