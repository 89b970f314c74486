package reconcile

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/shared/task"
)

// Repair kinds: the repair column of reconcile_repairs.
const (
	RepairTaskRescue       = "task.rescue"
	RepairTaskGiveUp       = "task.give_up"
	RepairTaskResettle     = "task.resettle"
	RepairDerivativeRetry  = "task.derivative_retry"
	RepairSlotsRebuild     = "slots.rebuild"
	RepairWaitlistWake     = "waitlist.wake"
	RepairUploadExpire     = "upload.expire"
	RepairUploadRescue     = "upload.rescue"
	RepairUploadGiveUp     = "upload.give_up"
	RepairRenderRescue     = "render.rescue"
	RepairRenderResettle   = "render.resettle"
	RepairRenderGiveUp     = "render.give_up"
	slotScopeAggregateType = "slot_scope"
)

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// repair is one row of reconcile_repairs.
type repair struct {
	Kind          string
	AggregateType string
	AggregateID   string
	Reason        string
	Rescue        bool
}

// record writes the audit row of a repair; inside the repair's
// transaction, so a repair rolled back leaves no row.
func record(ctx context.Context, db execer, r repair) error {
	if _, err := db.Exec(ctx, `INSERT INTO reconcile_repairs (repair, aggregate_type, aggregate_id, reason, rescue)
		VALUES ($1, $2, $3, $4, $5)`, r.Kind, r.AggregateType, r.AggregateID, r.Reason, r.Rescue); err != nil {
		return fmt.Errorf("record repair %s of %s %s: %w", r.Kind, r.AggregateType, r.AggregateID, err)
	}
	return nil
}

// recordTaskRescue writes the audit row of a task rescue, naming the
// timeline row its touch wrote and taking that row's time: an event the
// same transaction wrote belongs to this rescue (takenRescues).
func recordTaskRescue(ctx context.Context, tx pgx.Tx, id uuid.UUID, version int64) error {
	tag, err := tx.Exec(ctx, `INSERT INTO reconcile_repairs (repair, aggregate_type, aggregate_id, reason, rescue, task_version, created_at)
		SELECT $1, $2, $3, coalesce(reason, ''), true, version, created_at FROM task_events WHERE task_id = $4 AND version = $5`,
		RepairTaskRescue, task.AggregateType, id.String(), id, version)
	if err != nil {
		return fmt.Errorf("record rescue of task %s: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("record rescue of task %s: no timeline row at version %d", id, version)
	}
	return nil
}
