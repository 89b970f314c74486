package replay

import (
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/task"
)

// Action is what a replay would lead to.
type Action string

// The actions of a [Verdict].
const (
	// Act: the consumer would do its work for the event (and, thanks to the
	// business keys, only the part not done yet).
	Act Action = "ACT"
	// StaleNoop: the task has moved past the event; the consumer would
	// record it as STALE_NOOP and change nothing. Replaying it is harmless
	// and clears the quarantine.
	StaleNoop Action = "STALE_NOOP"
	// Refuse: the replay would fail again or must never be sent; it is not
	// approved and never executed.
	Refuse Action = "REFUSED"
)

// Verdict is what a replay would do now, and why.
type Verdict struct {
	Action Action `json:"action"`
	// Code is a short stable reason, e.g. "submit.stale" or
	// "security.tenant_mismatch".
	Code   string `json:"code"`
	Reason string `json:"reason"`
}

// Statuses of a message_replays row.
const (
	StatusDryRun   = "DRY_RUN"
	StatusApproved = "APPROVED"
	StatusExecuted = "EXECUTED"
	StatusRejected = "REJECTED"
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
	Status    string             `json:"status"`
	PlannedAt time.Time          `json:"planned_at"`
	Message   quarantine.Message `json:"message"`
	// Copies are other open quarantine rows of the same event and
	// consumer (quarantined by the adapter and again from the DLQ): one
	// replay settles them all.
	Copies []uuid.UUID `json:"copies,omitempty"`
	// Event is the quarantined envelope; nil when it cannot be read, and
	// EventError says why.
	Event      *envelope.Envelope `json:"event,omitempty"`
	EventError string             `json:"event_error,omitempty"`
	Target     *Destination       `json:"target,omitempty"`
	// Task is the task the event is about, as it is now; nil when the
	// event names none or it does not exist.
	Task         *TaskState `json:"task,omitempty"`
	Effects      Effects    `json:"effects"`
	PriorReplays []Prior    `json:"prior_replays,omitempty"`
	Verdict      Verdict    `json:"verdict"`
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

// TaskState is a generation task as it is now.
type TaskState struct {
	TaskID          uuid.UUID            `json:"task_id"`
	TenantID        uuid.UUID            `json:"tenant_id"`
	Status          string               `json:"status"`
	Version         int64                `json:"version"`
	Progress        int                  `json:"progress"`
	CancelRequested bool                 `json:"cancel_requested"`
	Provider        string               `json:"provider,omitempty"`
	ProviderJobID   string               `json:"provider_job_id,omitempty"`
	NextRetryAt     *time.Time           `json:"next_retry_at,omitempty"`
	NextPollAt      *time.Time           `json:"next_poll_at,omitempty"`
	ErrorCode       string               `json:"error_code,omitempty"`
	UpdatedAt       time.Time            `json:"updated_at"`
	Timeline        []task.TimelineEntry `json:"timeline"` // the latest transitions, oldest first
}

// Effects are the side effects already done for the task, and whether the
// consumer already processed the quarantined event.
type Effects struct {
	Attempts    []Attempt             `json:"attempts"`
	Assets      []Asset               `json:"assets"`
	Reservation *billing.Reservation  `json:"reservation,omitempty"`
	Ledger      []billing.LedgerEntry `json:"ledger"`
	// Inbox is the consumer's inbox_dedup row for the original event; nil
	// when the consumer never committed it.
	Inbox *inbox.Record `json:"inbox,omitempty"`
}

// Attempt is a task_attempts row: one submission to a provider.
type Attempt struct {
	AttemptNo      int        `json:"attempt_no"`
	AttemptID      uuid.UUID  `json:"attempt_id"`
	Status         string     `json:"status"`
	Provider       string     `json:"provider"`
	ProviderJobID  string     `json:"provider_job_id,omitempty"` // the remote job
	IdempotencyKey string     `json:"provider_idempotency_key"`
	ErrorCode      string     `json:"error_code,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	ResponseAt     *time.Time `json:"response_at,omitempty"`
}

// Asset is an assets row of the task.
type Asset struct {
	AssetID       uuid.UUID  `json:"asset_id"`
	Kind          string     `json:"kind"`
	ObjectKey     string     `json:"object_key"`
	SizeBytes     int64      `json:"size_bytes"`
	SourceAssetID *uuid.UUID `json:"source_asset_id,omitempty"`
	CreatedAt     time.Time  `json:"created_at"`
}

// Prior is an earlier replay of the same event to the same consumer.
type Prior struct {
	ReplayID      uuid.UUID `json:"replay_id"`
	Status        string    `json:"status"`
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
	Verdict     *Verdict `json:"verdict,omitempty"`
	TaskStatus  string   `json:"task_status,omitempty"`
	TaskVersion int64    `json:"task_version,omitempty"`
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
	Status          string     `json:"status"`
	Ticket          string     `json:"ticket"`
	Operator        string     `json:"operator"`
	Reason          string     `json:"reason"`
	CreatedAt       time.Time  `json:"created_at"`
	ApprovedAt      *time.Time `json:"approved_at,omitempty"`
	ExecutedAt      *time.Time `json:"executed_at,omitempty"`
	Steps           []Step     `json:"steps"`
	// Plan is the report the dry run (or the bulk approval) recorded.
	Plan *Report `json:"plan,omitempty"`
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
