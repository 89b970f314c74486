package replay

import (
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
)

// What a dry run records in the columns a decision fills later.
const (
	NoTicket     = "none"
	DryRunReason = "dry run"
)

// Report is a dry run: the message, the state it would meet, and the
// verdict. It is what [Desk.Plan] returns and what dry_run_report keeps.
type Report struct {
	// ReplayID is the message_replays row: the plan id, and the approval id
	// once approved.
	ReplayID  uuid.UUID          `json:"replay_id"`
	Status    Status             `json:"status"`
	PlannedAt time.Time          `json:"planned_at"`
	Message   quarantine.Message `json:"message"`
	// Copies are other open quarantine rows of the same event and
	// consumer (the same event id under another payload): one replay
	// settles them all.
	Copies []uuid.UUID `json:"copies,omitempty"`
	// Event is the quarantined envelope; nil when it cannot be read, and
	// EventError says why.
	Event      *envelope.Envelope `json:"event,omitempty"`
	EventError string             `json:"event_error,omitempty"`
	// EventTime is when the event was made as far as the database can
	// tell, and EventTimeFrom which clue said so (TimeFromEventID,
	// TimeFromOutbox, TimeFromQuarantine): what the replay window is
	// checked against. ReplayWindow is that window.
	EventTime     time.Time     `json:"event_time"`
	EventTimeFrom string        `json:"event_time_from"`
	ReplayWindow  time.Duration `json:"replay_window"`
	Target        *Destination  `json:"target,omitempty"`
	// Task is the task the event is about, as it is now; nil when the
	// event names none or it does not exist.
	Task         *preview.TaskState `json:"task,omitempty"`
	Effects      preview.Effects    `json:"effects"`
	PriorReplays []Prior            `json:"prior_replays,omitempty"`
	Verdict      preview.Verdict    `json:"verdict"`
}

// Destination is where a replay is written: the original topic, tag and
// message group.
type Destination struct {
	Topic        string `json:"topic"` // firm name
	Tag          string `json:"tag"`
	MessageGroup string `json:"message_group,omitempty"`
	// Delayed: the topic is a DELAY topic; the replay is due at once.
	Delayed bool `json:"delayed,omitempty"`
	// From says how the destination was found: "outbox" (the original
	// event's outbox row), "quarantine" (the topic the message was read
	// from) or "catalog" (the consumer group's subscription, for a dead
	// letter whose original row was pruned).
	From string `json:"from"`
	// AlsoConsumedBy lists other consumer groups that take this topic and
	// tag: they receive the replay too, as a new event.
	AlsoConsumedBy []string `json:"also_consumed_by,omitempty"`
}

// Prior is an earlier replay of the same event to the same consumer.
type Prior struct {
	ReplayID      uuid.UUID `json:"replay_id"`
	Status        Status    `json:"status"`
	ReplayEventID string    `json:"replay_event_id,omitempty"`
	Ticket        string    `json:"ticket"`
	Operator      string    `json:"operator"`
	CreatedAt     time.Time `json:"created_at"`
}

// Step is one audited step of a replay.
type Step struct {
	Step     string    `json:"step"` // planned, approved, executed, refused
	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	Ticket   string    `json:"ticket,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	// Verdict is the verdict checked at this step, with the task's state
	// and version it was checked against.
	Verdict     *preview.Verdict `json:"verdict,omitempty"`
	TaskStatus  string           `json:"task_status,omitempty"`
	TaskVersion int64            `json:"task_version,omitempty"`
	// ReplayEventID and Target are set on the executed step.
	ReplayEventID string       `json:"replay_event_id,omitempty"`
	Target        *Destination `json:"target,omitempty"`
	Bulk          bool         `json:"bulk,omitempty"`
}

// The steps.
const (
	StepPlanned  = "planned"
	StepApproved = "approved"
	StepExecuted = "executed"
	StepRefused  = "refused"
)

// Replay is a message_replays row with its audit trail.
type Replay struct {
	ReplayID        uuid.UUID  `json:"replay_id"`
	OriginalEventID uuid.UUID  `json:"original_event_id"`
	ReplayEventID   *uuid.UUID `json:"replay_event_id,omitempty"`
	QuarantineID    uuid.UUID  `json:"quarantine_id"`
	Consumer        string     `json:"consumer"`
	Topic           string     `json:"topic"`
	Status          Status     `json:"status"`
	Ticket          string     `json:"ticket"`
	Operator        string     `json:"operator"`
	Reason          string     `json:"reason"`
	CreatedAt       time.Time  `json:"created_at"`
	ApprovedAt      *time.Time `json:"approved_at,omitempty"`
	ExecutedAt      *time.Time `json:"executed_at,omitempty"`
	Steps           []Step     `json:"steps"`
	// Plan is the report the dry run (or the bulk approval) recorded: the
	// before.
	Plan *Report `json:"plan,omitempty"`
	// After is what the replay did once its consumer committed it; nil
	// until then (see [Desk.RecordOutcomes]).
	After *After `json:"after,omitempty"`
}

// stored is what dry_run_report holds.
type stored struct {
	QuarantineID uuid.UUID          `json:"quarantine_id"`
	Plan         Report             `json:"plan"`
	Steps        []Step             `json:"steps"`
	Bulk         *quarantine.Filter `json:"bulk_filter,omitempty"`
}

// step makes the step record of an inspection.
func (r Report) step(name string, at time.Time, operator string) Step {
	s := Step{Step: name, At: at, Operator: operator, Verdict: &r.Verdict}
	if r.Task != nil {
		s.TaskStatus, s.TaskVersion = r.Task.Status, r.Task.Version
	}
	return s
}

// topic is where the replay goes: the target's topic, else the one the
// message came from.
func (r Report) topic() string {
	if r.Target != nil {
		return r.Target.Topic
	}
	return r.Message.Topic
}
