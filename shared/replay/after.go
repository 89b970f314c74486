package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/preview"
)

// After is what a replay did, read once its consumer committed the replay
// event: the task's state and side effects then, beside the plan's before.
type After struct {
	// AppliedAt is when the consumer committed the replay event, and
	// Result what its inbox recorded: APPLIED, or STALE_NOOP when the
	// event met a state it no longer applied to.
	AppliedAt  time.Time          `json:"applied_at"`
	Result     string             `json:"result"`
	RecordedAt time.Time          `json:"recorded_at"`
	Task       *preview.TaskState `json:"task,omitempty"`
	Effects    preview.Effects    `json:"effects"`
	// BeforeStatus and BeforeVersion are the task's as the plan found
	// it, for reading the two side by side (the plan has it all).
	BeforeStatus  string `json:"before_status,omitempty"`
	BeforeVersion int64  `json:"before_version,omitempty"`
	// Note says why Task is missing, when it is.
	Note string `json:"note,omitempty"`
}

// afterBatch bounds the replays one call records.
const afterBatch = 100

// RecordOutcomes records the after-snapshot of every executed replay whose
// event its consumer has committed since the last call (found by the
// replay event's row in the consumer's inbox): the task's state and side
// effects as this call reads them (the reconcile tick after the commit; the
// inbox's processed_at is kept as applied_at), in after_report. It reports
// how many it recorded, and the errors of those it could not.
func (desk *Desk) RecordOutcomes(ctx context.Context) (int, error) {
	rows, _ := desk.db.Query(ctx, `SELECT r.replay_id, i.result_code, i.processed_at FROM message_replays r
		JOIN inbox_dedup i ON i.consumer_name = r.consumer_name AND i.event_id = r.replay_event_id
		WHERE r.status = $1 AND r.applied_at IS NULL ORDER BY r.executed_at LIMIT `+fmt.Sprint(afterBatch), StatusExecuted)
	type applied struct {
		ID     uuid.UUID
		Result string
		At     time.Time
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[applied]) // a failed query's error too
	if err != nil {
		return 0, fmt.Errorf("find applied replays: %w", err)
	}
	n := 0
	var errs []error
	for _, a := range found {
		var res aggregate.Result
		err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
			var err error
			res, err = aggregate.Apply(ctx, tx, Kind, a.ID, unrecorded, func(ctx context.Context, tx pgx.Tx, cur Replay) (aggregate.Result, error) {
				return aggregate.Applied, desk.recordAfter(ctx, tx, cur, a.Result, a.At)
			})
			return err
		})
		if err != nil {
			// One replay that cannot be read must not hold the others back.
			errs = append(errs, err)
			continue
		}
		if res == aggregate.Applied {
			n++
			countStep(metricApplied)
		}
	}
	return n, errors.Join(errs...)
}

// unrecorded holds for an executed replay whose after-snapshot is not
// recorded yet.
var unrecorded = aggregate.Transition[Status, Replay]{From: []Status{StatusExecuted}, If: func(r Replay) bool { return r.After == nil }}

// recordAfter records cur's after-snapshot: its consumer committed the
// replay event at at with result.
func (desk *Desk) recordAfter(ctx context.Context, tx pgx.Tx, cur Replay, result string, at time.Time) error {
	after := After{AppliedAt: at.UTC(), Result: result,
		Effects: preview.Effects{Attempts: []preview.Attempt{}, Assets: []preview.Asset{}}}
	if before := cur.Plan.Task; before != nil {
		after.BeforeStatus, after.BeforeVersion = before.Status, before.Version
	}
	r, err := readRow(ctx, tx, cur.QuarantineID)
	switch {
	case errors.Is(err, ErrNotFound):
		after.Note = "the quarantined message is gone (pruned), so its task is not known here"
		if after.RecordedAt, err = dbNow(ctx, tx); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		in, err := desk.inspect(ctx, tx, r, cur.ReplayID)
		if err != nil {
			return err
		}
		after.RecordedAt, after.Task, after.Effects = in.now, in.report.Task, in.report.Effects
		if after.Task == nil {
			after.Note = "the event names no task that exists"
		}
	}
	report, err := json.Marshal(after)
	if err != nil {
		return fmt.Errorf("encode after-snapshot: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE message_replays SET applied_at = $2, after_report = $3
		WHERE replay_id = $1 AND applied_at IS NULL`, cur.ReplayID, after.AppliedAt, string(report))
	if err != nil {
		return fmt.Errorf("record after-snapshot of replay %s: %w", cur.ReplayID, err)
	}
	if n := tag.RowsAffected(); n != 1 {
		return fmt.Errorf("record after-snapshot of replay %s: %d rows changed, want 1", cur.ReplayID, n)
	}
	return nil
}
