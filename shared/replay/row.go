package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/quarantine"
)

const replayColumns = `replay_id, original_event_id, replay_event_id, consumer_name, topic, status, ticket, operator, reason,
	created_at, approved_at, executed_at, coalesce(dry_run_report, '{}'::jsonb), after_report`

// scanReplay reads replayColumns: the row, its audit trail and the plan
// it recorded.
func scanReplay(r pgx.CollectableRow) (Replay, error) {
	var (
		c   Replay
		rec stored
	)
	// pgx decodes the jsonb columns: dry_run_report into rec, after_report
	// into c.After (nil while it is NULL).
	err := r.Scan(&c.ReplayID, &c.OriginalEventID, &c.ReplayEventID, &c.Consumer, &c.Topic, &c.Status, &c.Ticket, &c.Operator, &c.Reason,
		&c.CreatedAt, &c.ApprovedAt, &c.ExecutedAt, &rec, &c.After)
	if err != nil {
		return Replay{}, fmt.Errorf("read replay: %w", err)
	}
	c.CreatedAt, c.ApprovedAt, c.ExecutedAt = c.CreatedAt.UTC(), pg.UTC(c.ApprovedAt), pg.UTC(c.ExecutedAt)
	c.QuarantineID, c.Steps, c.Plan = rec.QuarantineID, rec.Steps, &rec.Plan
	if c.Steps == nil {
		c.Steps = []Step{}
	}
	c.Plan.ReplayID, c.Plan.Status = c.ReplayID, c.Status
	return c, nil
}

// readReplays reads the rows where selects, in the order it says.
func readReplays(ctx context.Context, q querier, where string, args ...any) ([]Replay, error) {
	rows, err := q.Query(ctx, `SELECT `+replayColumns+` FROM message_replays WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read replays: %w", err)
	}
	return pgx.CollectRows(rows, scanReplay)
}

// readReplay reads one row, locked until tx ends when lock is set.
func readReplay(ctx context.Context, q querier, id uuid.UUID, lock bool) (Replay, error) {
	where := `replay_id = $1`
	if lock {
		where += ` FOR UPDATE`
	}
	found, err := readReplays(ctx, q, where, id)
	switch {
	case err != nil:
		return Replay{}, fmt.Errorf("read replay %s: %w", id, err)
	case len(found) == 0:
		return Replay{}, fmt.Errorf("%w: no replay %s", ErrNotFound, id)
	}
	return found[0], nil
}

// lockReplay reads a replay row and locks it until tx ends.
func lockReplay(ctx context.Context, tx pgx.Tx, id uuid.UUID) (Replay, error) {
	return readReplay(ctx, tx, id, true)
}

// Get returns a replay with its audit trail and the plan it recorded.
func (desk *Desk) Get(ctx context.Context, replayID uuid.UUID) (Replay, error) {
	return readReplay(ctx, desk.db, replayID, false)
}

// replaysOf lists the replays of a quarantine row's event to its consumer,
// and those recorded for the row itself, without their plans.
func replaysOf(ctx context.Context, q querier, r quarantine.Message) ([]Replay, error) {
	original, _ := uuid.Parse(r.EventID)
	found, err := readReplays(ctx, q, `consumer_name = $1 AND ((original_event_id = $2 AND $2 <> $4)
			OR dry_run_report->>'quarantine_id' = $3)
		ORDER BY created_at, replay_id`, r.Consumer, original, r.QuarantineID.String(), uuid.Nil)
	if err != nil {
		return nil, fmt.Errorf("read replays of %s: %w", r.QuarantineID, err)
	}
	for i := range found {
		found[i].Plan = nil
	}
	return found, nil
}

// priors reads the other replays of the event to the consumer.
func priors(ctx context.Context, q querier, consumer string, eventID, self uuid.UUID) ([]Prior, error) {
	rows, _ := q.Query(ctx, `SELECT replay_id, status, coalesce(replay_event_id::text, '') AS replay_event_id, ticket, operator, created_at
		FROM message_replays WHERE original_event_id = $1 AND consumer_name = $2 AND replay_id <> $3
		ORDER BY created_at, replay_id`, eventID, consumer, self)
	found, err := pgx.CollectRows(rows, pgx.RowToStructByName[Prior]) // a failed query's error too
	if err != nil {
		return nil, fmt.Errorf("read earlier replays: %w", err)
	}
	for i := range found {
		found[i].CreatedAt = found[i].CreatedAt.UTC()
	}
	return found, nil
}

// record writes in's plan as a new DRY_RUN row under a new replay id,
// planned by operator: a dry run, or the first step of a bulk approval
// when bulk, its filter, is set. It returns the row as written, for the
// decision that follows it in a bulk approval's transaction.
func record(ctx context.Context, tx pgx.Tx, in *inspection, operator string, bulk *quarantine.Filter) (Replay, error) {
	rep := &in.report
	rep.ReplayID = uuid.Must(uuid.NewV7())
	step := rep.step(StepPlanned, in.now, operator)
	step.Bulk = bulk != nil
	report, err := json.Marshal(stored{QuarantineID: rep.Message.QuarantineID, Plan: *rep, Steps: []Step{step}, Bulk: bulk})
	if err != nil {
		return Replay{}, fmt.Errorf("encode replay report: %w", err)
	}
	original, _ := uuid.Parse(rep.Message.EventID) // the nil UUID for a message without a readable id
	_, err = tx.Exec(ctx, `INSERT INTO message_replays (replay_id, original_event_id, consumer_name, topic, ticket, operator, reason,
			status, dry_run_report, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		rep.ReplayID, original, rep.Message.Consumer, rep.topic(), NoTicket, operator, DryRunReason, StatusDryRun, string(report), in.now)
	if err != nil {
		return Replay{}, fmt.Errorf("record replay of %s: %w", rep.Message.QuarantineID, err)
	}
	return Replay{ReplayID: rep.ReplayID, Status: StatusDryRun}, nil
}

// change is what a move writes beside the status: the step it adds to
// the audit trail, and the columns the new status fills.
type change struct {
	step Step
	// decision is the approval's (or the refusal's at approval): ticket,
	// operator and reason.
	decision *Decision
	topic    string     // where the replay goes; empty: unchanged
	event    *uuid.UUID // the replay event, on EXECUTED
}

// move moves cur, locked in tx, to status to by ch: the one write that
// changes a replay's status. A move the table does not have is an
// [*aggregate.IllegalMoveError], and nothing is written.
func move(ctx context.Context, tx pgx.Tx, cur Replay, to Status, ch change) error {
	from := cur.Status
	if !moves.Legal(from, to) {
		return &aggregate.IllegalMoveError{Kind: Kind.Name, ID: cur.ReplayID.String(), From: string(from), To: string(to)}
	}
	steps, err := json.Marshal([]Step{ch.step})
	if err != nil {
		return fmt.Errorf("encode replay step: %w", err)
	}
	var ticket, operator, reason *string
	if d := ch.decision; d != nil {
		ticket, operator, reason = &d.Ticket, &d.Operator, &d.Reason
	}
	var approvedAt, executedAt *time.Time
	switch to {
	case StatusApproved:
		approvedAt = &ch.step.At
	case StatusExecuted:
		executedAt = &ch.step.At
	}
	tag, err := tx.Exec(ctx, `UPDATE message_replays SET status = $2, ticket = coalesce($3, ticket), operator = coalesce($4, operator),
			reason = coalesce($5, reason), topic = coalesce(nullif($6, ''), topic), replay_event_id = coalesce($7, replay_event_id),
			approved_at = coalesce($8, approved_at), executed_at = coalesce($9, executed_at),
			dry_run_report = jsonb_set(dry_run_report, '{steps}', coalesce(dry_run_report->'steps', '[]'::jsonb) || $10::jsonb)
		WHERE replay_id = $1 AND status = $11`,
		cur.ReplayID, to, ticket, operator, reason, ch.topic, ch.event, approvedAt, executedAt, string(steps), from)
	if err != nil {
		return fmt.Errorf("record %s of replay %s: %w", ch.step.Step, cur.ReplayID, err)
	}
	if n := tag.RowsAffected(); n != 1 {
		return fmt.Errorf("record %s of replay %s: %d rows changed, want 1", ch.step.Step, cur.ReplayID, n)
	}
	return nil
}
