package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// rescueReason starts the timeline reason of every re-emission, for
// people reading the timeline; rescues are counted from reconcile_repairs.
const rescueReason = "reconcile: re-emitted "

// TaskRescuerConfig configures the [TaskRescuer].
type TaskRescuerConfig struct {
	// Interval is how often Run makes a pass; DefaultInterval when zero.
	Interval time.Duration
	// Batch bounds the tasks of each state one pass handles; DefaultBatch.
	Batch int
	// MaxRescues is how many rounds without progress a task gets before
	// a person decides; DefaultMaxRescues.
	MaxRescues int
}

// TaskRescueReport counts what one pass of the [TaskRescuer] did.
type TaskRescueReport struct {
	Rescued        map[task.Status]int
	NeedsAttention int
}

// TaskRescuer looks for tasks whose progress was lost (an event that died
// with a broker, a delayed wake-up that never came, a stage that crashed
// after its commit but before its next event) and re-emits the event of
// their current step; the stage's own checks make a spurious one a no-op.
// Each rescue is a versioned touch of the task, so it is recorded in
// task_events and reconcile_repairs and happens once per deadline, not
// once per pass.
type TaskRescuer struct {
	loop
	p     Params
	cfg   TaskRescuerConfig
	rules []rescueRule
}

// rescueRule is when a task in one state counts as lost, and what
// re-drives it.
type rescueRule struct {
	status task.Status
	// due is the column compared with now - dueWindow: next_retry_at,
	// next_poll_at, or updated_at when the state has no due time.
	due       string
	dueWindow time.Duration
	// quiet is how long the task must not have been touched; a rescue
	// touches updated_at and leaves the due time, so both past their
	// window is once per deadline, not once per pass.
	quiet time.Duration
	emit  func(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error)
}

// NewTaskRescuer returns the task rescuer over p, configured by
// p.Maintenance.Tasks.
func NewTaskRescuer(p Params) *TaskRescuer {
	p = defaults(p)
	cfg := p.Maintenance.Tasks
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.MaxRescues = cmp.Or(cfg.MaxRescues, DefaultMaxRescues)
	s := &TaskRescuer{loop: newLoop("task_rescuer", cfg.Interval, p.Logger), p: p, cfg: cfg}
	j := p.Journey
	lookups := j.ReconcileAfter*time.Duration(j.ReconcileRounds+1) + j.ScanGrace
	s.rules = []rescueRule{
		{task.Queued, "updated_at", j.ScanGrace, j.ScanGrace, s.submit},
		{task.WaitingRetry, "next_retry_at", j.ScanGrace, j.ScanGrace, s.submit},
		{task.Submitting, "updated_at", p.Timeout + j.ScanGrace, p.Timeout + j.ScanGrace, s.submit},
		{task.ProviderRunning, "next_poll_at", j.ScanGrace, j.ScanGrace, s.lostPoll},
		{task.Fetching, "updated_at", j.StuckAfter, j.StuckAfter, s.lostFetch},
		{task.MediaProcessing, "updated_at", j.StuckAfter, j.StuckAfter, s.lostMedia},
		{task.Reconciling, "updated_at", lookups, lookups, s.lostLookup},
		{task.CancelReconciling, "updated_at", lookups, lookups, s.lostCancelLook},
	}
	return s
}

// Run makes a pass every Interval until ctx ends.
func (s *TaskRescuer) Run(ctx context.Context) error {
	return s.run(ctx, func(ctx context.Context) error { _, err := s.RunOnce(ctx); return err })
}

// RunOnce makes one pass at the clock's time.
func (s *TaskRescuer) RunOnce(ctx context.Context) (TaskRescueReport, error) {
	return s.pass(ctx, clock(s.p))
}

func (s *TaskRescuer) pass(ctx context.Context, now time.Time) (TaskRescueReport, error) {
	rep := TaskRescueReport{Rescued: map[task.Status]int{}}
	for _, rule := range s.rules {
		// The due column is one of the rule table's constants, never input.
		rows, err := s.p.Pool.Query(ctx, `SELECT task_id FROM generation_tasks
			WHERE status = $1 AND `+rule.due+` < $2::timestamptz - $3::bigint * interval '1 millisecond'
			  AND updated_at < $2::timestamptz - $4::bigint * interval '1 millisecond'
			ORDER BY updated_at LIMIT $5`,
			rule.status, now, rule.dueWindow.Milliseconds(), rule.quiet.Milliseconds(), s.cfg.Batch)
		if err != nil {
			return rep, fmt.Errorf("scan %s: %w", rule.status, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return rep, fmt.Errorf("scan %s: %w", rule.status, err)
		}
		for _, id := range ids {
			outcome, err := s.rescue(ctx, id, rule.status, now, rule.emit)
			if err != nil {
				return rep, err
			}
			switch outcome {
			case rescued:
				rep.Rescued[rule.status]++
			case gaveUp:
				rep.NeedsAttention++
			}
		}
	}
	return rep, nil
}

type rescueOutcome int

const (
	skipped rescueOutcome = iota
	rescued
	gaveUp
)

// errGiveUp asks rescue to hand the task to a person instead.
var errGiveUp = errors.New("give up")

// errNoAttempt: the task names a provider job no attempt records, so
// there is nothing to re-drive; one such task must not stop the pass.
var errNoAttempt = fmt.Errorf("%w: no attempt records the provider job", errGiveUp)

// rescue touches the task with the events emit returns, or hands it to a
// person, if it is, as locked, still in status: otherwise it moved since
// the pass read it, and the rescue is stale.
func (s *TaskRescuer) rescue(ctx context.Context, id uuid.UUID, status task.Status, now time.Time, emit func(context.Context, pgx.Tx, task.Task) ([]outbox.Event, error)) (rescueOutcome, error) {
	var out rescueOutcome
	err := pgx.BeginFunc(ctx, s.p.Pool, func(tx pgx.Tx) error {
		out = skipped
		_, err := aggregate.Apply(ctx, tx, task.Kind, id, task.Guard(status), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
			// An event of the task still in the outbox is its next step on
			// the way: re-emitting adds nothing, and must not count as a
			// round without progress.
			if pending, err := outbox.PendingFor(ctx, tx, cur.ID.String()); err != nil || pending {
				return aggregate.Stale, err
			}
			if onItsWay, err := rescueInFlight(ctx, tx, cur.ID, s.p.Journey.StuckAfter, now); err != nil || onItsWay {
				return aggregate.Stale, err
			}
			rounds, err := roundsWithoutProgress(ctx, tx, cur.ID)
			if err != nil {
				return 0, err
			}
			// The rescue belongs to the task's trace: what it re-drives
			// carries on there, linked to the scan.
			ctx, span, err := task.ContinueTrace(ctx, tx, cur.ID, "reconcile "+string(status))
			defer span.End()
			if err != nil {
				return 0, err
			}
			events, err := emit(ctx, tx, cur)
			if rounds >= s.cfg.MaxRescues && err == nil {
				err = errGiveUp
			}
			if errors.Is(err, errGiveUp) {
				out = gaveUp
				code, msg := giveUpReason(cur.Status, rounds)
				if errors.Is(err, errNoAttempt) {
					code = "reconcile.attempt_missing"
					msg = fmt.Sprintf("the task is %s with provider job %q, but no attempt records that job: nothing can be polled or looked at; a person decides", cur.Status, cur.ProviderJobID)
				}
				if _, err := task.Apply(ctx, tx, scanOrigin, cur, task.Transition{To: task.NeedsAttention, Reason: "reconcile: " + code,
					Set: task.Fields{ErrorCode: &code, ErrorMessage: &msg}}); err != nil {
					return 0, err
				}
				return aggregate.Applied, record(ctx, tx, repair{Kind: RepairTaskGiveUp, AggregateType: task.AggregateType, AggregateID: cur.ID.String(), Reason: code + ": " + msg})
			}
			if err != nil {
				return 0, err
			}
			if len(events) == 0 {
				return aggregate.Stale, nil
			}
			out = rescued
			touched, err := task.Touch(ctx, tx, scanOrigin, cur, rescueReason+events[0].Envelope.EventType, events...)
			if err != nil {
				return 0, err
			}
			return aggregate.Applied, recordTaskRescue(ctx, tx, cur.ID, touched.Version)
		})
		return err
	})
	if errors.Is(err, task.ErrStale) {
		return skipped, nil
	}
	if err != nil {
		return skipped, fmt.Errorf("rescue task %s: %w", id, err)
	}
	if out == gaveUp {
		s.p.Logger.WarnContext(ctx, "task needs attention", slog.String("task_id", id.String()))
	}
	return out, nil
}

// giveUpReason is the error code and message of a task the rescuer hands
// to a person.
func giveUpReason(status task.Status, rounds int) (code, message string) {
	switch status {
	case task.Reconciling:
		return "reconcile.submit_unknown", "the submit's outcome stayed unknown through repeated lookups; resubmitting could pay twice, so a person decides"
	case task.CancelReconciling:
		return "reconcile.cancel_unknown", "whether the provider stopped the job after the client's cancel stayed unknown through repeated looks; a person decides whether to charge"
	}
	return "reconcile.no_progress", fmt.Sprintf("the reconciler re-emitted the %s step %d times, each reached its stage, and the task did not move; "+
		"the stage's logs and the quarantine (adapter quarantine list) say why; a person decides", status, rounds)
}
