package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// Approve approves the dry run replayID under d, after checking its
// verdict again against the state now: the row becomes APPROVED and the
// report returned is the one approved. When the verdict is (or has
// become) a refusal, the row becomes REJECTED, and the error wraps
// [ErrRefused] with the reason. Its id is the approval id [Desk.Execute]
// takes.
func (desk *Desk) Approve(ctx context.Context, replayID uuid.UUID, d Decision) (Report, error) {
	if err := d.validate(); err != nil {
		return Report{}, err
	}
	var (
		rep     Report
		refused error
	)
	err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
		cur, err := lockReplay(ctx, tx, replayID)
		if err != nil {
			return err
		}
		if cur.Status != StatusDryRun {
			return fmt.Errorf("%w: replay %s is %s already (ticket %s, operator %s)", ErrDecided, replayID, cur.Status, cur.Ticket, cur.Operator)
		}
		if key := apiKeyOf(d.Operator); key != "" && key == apiKeyOf(cur.Operator) {
			return fmt.Errorf("%w: replay %s was planned with api key %s (%s); a replay is approved with another admin key, by another person",
				ErrSamePlanner, replayID, key, cur.Operator)
		}
		in, now, err := desk.reinspect(ctx, tx, cur)
		if err != nil {
			return err
		}
		rep = in.report
		step := rep.step(StepApproved, now, d.Operator)
		step.Ticket, step.Reason = d.Ticket, d.Reason
		status := StatusApproved
		if rep.Verdict.Action == preview.Refuse {
			step.Step, status = StepRefused, StatusRejected
			refused = refusal(rep.Verdict)
		}
		rep.Status = status
		return decide(ctx, tx, replayID, status, d, rep, step, now)
	})
	if err != nil {
		return Report{}, err
	}
	countStep(map[bool]string{true: metricRefused, false: metricApproved}[refused != nil])
	return rep, refused
}

// decide moves a row to APPROVED or REJECTED under d and records step.
func decide(ctx context.Context, tx pgx.Tx, replayID uuid.UUID, status string, d Decision, rep Report, step Step, now time.Time) error {
	topic := rep.Message.Topic
	if rep.Target != nil {
		topic = rep.Target.Topic
	}
	var approvedAt *time.Time
	if status == StatusApproved {
		approvedAt = &now
	}
	_, err := recordStep(ctx, tx, replayID, step, `status = $2, ticket = $3, operator = $4, reason = $5, topic = $6,
		approved_at = coalesce($7, approved_at)`, status, d.Ticket, d.Operator, d.Reason, topic, approvedAt)
	return err
}

// recordStep changes a row by set, whose parameters start at $2, and adds
// step to the audit trail in its dry_run_report. It returns how many rows
// changed.
func recordStep(ctx context.Context, tx pgx.Tx, replayID uuid.UUID, step Step, set string, args ...any) (int64, error) {
	steps, err := json.Marshal([]Step{step})
	if err != nil {
		return 0, fmt.Errorf("encode replay step: %w", err)
	}
	args = append(append([]any{replayID}, args...), string(steps))
	tag, err := tx.Exec(ctx, `UPDATE message_replays SET `+set+`, dry_run_report = jsonb_set(dry_run_report, '{steps}',
		coalesce(dry_run_report->'steps', '[]'::jsonb) || $`+strconv.Itoa(len(args))+`::jsonb) WHERE replay_id = $1`, args...)
	if err != nil {
		return 0, fmt.Errorf("record %s of replay %s: %w", step.Step, replayID, err)
	}
	return tag.RowsAffected(), nil
}

// current is a message_replays row read for a decision.
type current struct {
	Replay
	rec stored
}

const replayColumns = `replay_id, original_event_id, replay_event_id, consumer_name, topic, status, ticket, operator, reason,
	created_at, approved_at, executed_at, coalesce(dry_run_report, '{}'::jsonb), after_report`

func scanReplay(r pgx.CollectableRow) (current, error) {
	var c current
	var report, after []byte
	err := r.Scan(&c.ReplayID, &c.OriginalEventID, &c.ReplayEventID, &c.Consumer, &c.Topic, &c.Status, &c.Ticket, &c.Operator, &c.Reason,
		&c.CreatedAt, &c.ApprovedAt, &c.ExecutedAt, &report, &after)
	if err != nil {
		return current{}, fmt.Errorf("read replay: %w", err)
	}
	if after != nil {
		c.After = &After{}
		if err := json.Unmarshal(after, c.After); err != nil {
			return current{}, fmt.Errorf("replay %s: read after_report: %w", c.ReplayID, err)
		}
	}
	if err := json.Unmarshal(report, &c.rec); err != nil {
		return current{}, fmt.Errorf("replay %s: read dry_run_report: %w", c.ReplayID, err)
	}
	c.CreatedAt, c.ApprovedAt, c.ExecutedAt = c.CreatedAt.UTC(), pg.UTC(c.ApprovedAt), pg.UTC(c.ExecutedAt)
	c.QuarantineID, c.Steps = c.rec.QuarantineID, c.rec.Steps
	if c.Steps == nil {
		c.Steps = []Step{}
	}
	return c, nil
}

// lockReplay reads a replay row and locks it until tx ends.
func lockReplay(ctx context.Context, tx pgx.Tx, id uuid.UUID) (current, error) {
	rows, err := tx.Query(ctx, `SELECT `+replayColumns+` FROM message_replays WHERE replay_id = $1 FOR UPDATE`, id)
	if err != nil {
		return current{}, fmt.Errorf("lock replay %s: %w", id, err)
	}
	c, err := pgx.CollectExactlyOneRow(rows, scanReplay)
	if errors.Is(err, pgx.ErrNoRows) {
		return current{}, fmt.Errorf("%w: no replay %s", ErrNotFound, id)
	}
	return c, err
}

// reinspect checks a recorded plan again: under the lock of its event and
// consumer, against the quarantine row and the task as they are now.
func (desk *Desk) reinspect(ctx context.Context, tx pgx.Tx, cur current) (inspection, time.Time, error) {
	r, err := readRow(ctx, tx, cur.rec.QuarantineID)
	if errors.Is(err, ErrNotFound) {
		now, err := dbNow(ctx, tx)
		if err != nil {
			return inspection{}, time.Time{}, err
		}
		rep := cur.rec.Plan
		rep.ReplayID = cur.ReplayID
		rep.Verdict = preview.Refuse.Because("quarantine.gone", "quarantined message %s no longer exists (pruned or deleted)", cur.rec.QuarantineID)
		return inspection{report: rep}, now, nil
	}
	if err != nil {
		return inspection{}, time.Time{}, err
	}
	if err := lockPair(ctx, tx, r.Message); err != nil {
		return inspection{}, time.Time{}, err
	}
	// Read again under the lock: a decision that held it may have
	// replayed the message meanwhile.
	if r, err = readRow(ctx, tx, cur.rec.QuarantineID); err != nil {
		return inspection{}, time.Time{}, err
	}
	now, err := dbNow(ctx, tx)
	if err != nil {
		return inspection{}, time.Time{}, err
	}
	in, err := desk.inspect(ctx, tx, r, now, cur.ReplayID)
	if err != nil {
		return inspection{}, time.Time{}, err
	}
	in.report.ReplayID = cur.ReplayID
	return in, now, nil
}

// Get returns a replay with its audit trail and the plan it recorded.
func (desk *Desk) Get(ctx context.Context, replayID uuid.UUID) (Replay, error) {
	rows, err := desk.db.Query(ctx, `SELECT `+replayColumns+` FROM message_replays WHERE replay_id = $1`, replayID)
	if err != nil {
		return Replay{}, fmt.Errorf("read replay %s: %w", replayID, err)
	}
	c, err := pgx.CollectExactlyOneRow(rows, scanReplay)
	if errors.Is(err, pgx.ErrNoRows) {
		return Replay{}, fmt.Errorf("%w: no replay %s", ErrNotFound, replayID)
	}
	if err != nil {
		return Replay{}, err
	}
	plan := c.rec.Plan
	plan.ReplayID, plan.Status = c.ReplayID, c.Status
	c.Plan = &plan
	return c.Replay, nil
}

// replaysOf lists the replays of a quarantine row's event to its consumer,
// and those recorded for the row itself, without their plans.
func replaysOf(ctx context.Context, q querier, r quarantine.Message) ([]Replay, error) {
	original, _ := uuid.Parse(r.EventID)
	rows, err := q.Query(ctx, `SELECT `+replayColumns+` FROM message_replays
		WHERE consumer_name = $1 AND ((original_event_id = $2 AND $2 <> '00000000-0000-0000-0000-000000000000'::uuid)
			OR dry_run_report->>'quarantine_id' = $3)
		ORDER BY created_at, replay_id`, r.Consumer, original, r.QuarantineID.String())
	if err != nil {
		return nil, fmt.Errorf("read replays of %s: %w", r.QuarantineID, err)
	}
	found, err := pgx.CollectRows(rows, scanReplay)
	if err != nil {
		return nil, err
	}
	out := make([]Replay, len(found))
	for i, c := range found {
		out[i] = c.Replay
	}
	return out, nil
}

// priors reads the other replays of the event to the consumer.
func priors(ctx context.Context, q querier, consumer string, eventID, self uuid.UUID) ([]Prior, error) {
	rows, err := q.Query(ctx, `SELECT replay_id, status, coalesce(replay_event_id::text, ''), ticket, operator, created_at
		FROM message_replays WHERE original_event_id = $1 AND consumer_name = $2 AND replay_id <> $3
		ORDER BY created_at, replay_id`, eventID, consumer, self)
	if err != nil {
		return nil, fmt.Errorf("read earlier replays: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Prior, error) {
		var p Prior
		err := r.Scan(&p.ReplayID, &p.Status, &p.ReplayEventID, &p.Ticket, &p.Operator, &p.CreatedAt)
		p.CreatedAt = p.CreatedAt.UTC()
		return p, err
	})
}

// apiKeyOf is the API key an operator string names ("alice (api key
// <id>)", or "api key <id>" when no person was named), "" when none: the
// command line names no key.
func apiKeyOf(operator string) string {
	i := strings.LastIndex(operator, "api key ")
	if i < 0 {
		return ""
	}
	return strings.TrimSuffix(operator[i+len("api key "):], ")")
}
