package task

import (
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/envelope"
)

// AggregateType is the envelope aggregate_type of every task event.
const AggregateType = "generation_task"

// Origin is what causes a change: the event a stage is handling, or an API
// call. Events written because of it carry its correlation and trace, and
// name its event as their cause.
type Origin struct {
	Producer      string // the stage, or "api"
	EventID       string // causing event; empty for API calls and scanners
	CorrelationID string // shared by every event of one generation
	TraceID       string
}

// FromEnvelope is the origin of work done for ev by producer.
func FromEnvelope(producer string, ev envelope.Envelope) Origin {
	return Origin{Producer: producer, EventID: ev.EventID, CorrelationID: ev.CorrelationID, TraceID: ev.TraceID}
}

// Payloads of the task events. They carry ids and versions only (docs/design.md
// §2): a handler reads the facts from the database. A field tagged
// `payload:"required"` must be present and non-zero (envelope.DecodePayload);
// a field added later must be optional, so that the consumers of the
// release before read the payload too.
type (
	// SubmitRequested asks the submit stage to (re)submit a task. A
	// delayed resubmit after a 429, a 503 or a missing slot carries a
	// [Wait] (RetryAttempt: the waits so far) and the provider's refusals
	// so far, which SUBMIT_MAX_RETRIES bounds.
	SubmitRequested struct {
		TaskID   uuid.UUID `json:"task_id" payload:"required"`
		Version  int64     `json:"version"`
		Refusals int       `json:"refusals,omitempty"`
		Wait
	}
	// PollDue asks the poll stage to check the provider job of an attempt.
	// PollAt identifies the poll chain: a message whose PollAt is not the
	// task's next_poll_at is stale. A poll the stage scheduled carries its
	// [Wait] (PROVIDER_RUNNING at the version it saw; RetryAttempt: the
	// polls of the chain so far).
	PollDue struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		AttemptID uuid.UUID `json:"attempt_id" payload:"required"`
		PollAt    time.Time `json:"poll_at"`
		Wait
	}
	// CallbackReceived carries a verified provider callback to the poll stage.
	CallbackReceived struct {
		Provider      string `json:"provider" payload:"required"`
		ProviderJobID string `json:"provider_job_id" payload:"required"`
	}
	// FetchRequested asks the fetch stage to store an attempt's output. A
	// fetch the stage put off because the output was not ready is a
	// delayed one and carries a [Wait].
	FetchRequested struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		AttemptID uuid.UUID `json:"attempt_id"`
		Wait
	}
	// Postprocess asks for one media step (the tag) on an asset: a task's
	// output or derivative, or (no TaskID) a tenant's upload. A content
	// review put off because the reviewer was unavailable is a delayed one
	// and carries a [Wait] whose RetryAttempt names the review's live chain
	// (its ExpectedVersion stays zero: the derivatives finishing meanwhile
	// must not make the wait stale).
	Postprocess struct {
		TaskID  uuid.UUID `json:"task_id,omitzero"`
		AssetID uuid.UUID `json:"asset_id" payload:"required"`
		Step    string    `json:"step"`
		Wait
	}
	// SettleRequested asks billing to capture or release the reservation
	// of a task, or (RenderID) of a render, decided by its terminal state.
	SettleRequested struct {
		TaskID   uuid.UUID `json:"task_id,omitzero"`
		RenderID uuid.UUID `json:"render_id,omitzero"`
		Status   Status    `json:"status"`
	}
	// StateChanged announces a committed transition of a task, or (RenderID)
	// of a render.
	StateChanged struct {
		TaskID    uuid.UUID `json:"task_id,omitzero"`
		RenderID  uuid.UUID `json:"render_id,omitzero"`
		TenantID  uuid.UUID `json:"tenant_id" payload:"required"`
		From      Status    `json:"from,omitempty"`
		To        Status    `json:"to" payload:"required"`
		Version   int64     `json:"version"`
		Progress  int       `json:"progress"`
		ErrorCode string    `json:"error_code,omitempty"`
		At        time.Time `json:"at"`
	}
	// RenderRequested asks the render stage for one step of a render:
	// RenderStart plans it (or finds its output stored already),
	// RenderChunk renders chunk Chunk, RenderJoin joins the chunks.
	RenderRequested struct {
		RenderID uuid.UUID `json:"render_id" payload:"required"`
		Step     string    `json:"step" payload:"required"`
		Chunk    int       `json:"chunk,omitempty"`
		// SlotWaits counts how often this chunk was put off because its
		// tenant rendered its RENDER_TENANT_CHUNKS already: the next wait
		// is longer.
		SlotWaits int `json:"slot_waits,omitempty"`
	}
	// ReconcileDue asks the reconciler to look at a task. Its [Wait]'s
	// Reason says why (a lost submit answer, [ReasonCancel]); a look the
	// reconciler put off again carries the state and version it expects.
	// Round counts the lookups already made for the attempt, and is
	// RetryAttempt too.
	ReconcileDue struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		AttemptID uuid.UUID `json:"attempt_id,omitempty" payload:"required"`
		Round     int       `json:"round,omitempty"`
		// Outages counts the lookups in a row a provider outage answered
		// (not rounds: they said nothing about the job); it spaces the next.
		Outages int `json:"outages,omitempty"`
		Wait
	}
)

// TaskRef is the task each payload is about (stage.Payload).
func (p SubmitRequested) TaskRef() uuid.UUID { return p.TaskID }

// TaskRef is the zero UUID: a callback names its job, and the event's
// aggregate names the task.
func (p CallbackReceived) TaskRef() uuid.UUID { return uuid.Nil }

// TaskRef is the task the poll is for.
func (p PollDue) TaskRef() uuid.UUID { return p.TaskID }

// TaskRef is the task whose output is fetched.
func (p FetchRequested) TaskRef() uuid.UUID { return p.TaskID }

// TaskRef is the task whose asset the step is for.
func (p Postprocess) TaskRef() uuid.UUID { return p.TaskID }

// TaskRef is the task to settle; the zero UUID for a render.
func (p SettleRequested) TaskRef() uuid.UUID { return p.TaskID }

// TaskRef is the zero UUID: a render is not a task (the render is the
// event's aggregate).
func (p RenderRequested) TaskRef() uuid.UUID { return uuid.Nil }

// TaskRef is the task to reconcile.
func (p ReconcileDue) TaskRef() uuid.UUID { return p.TaskID }

// Wait is what a delayed event of a business wait carries (seed 7.12.1):
// the state and version the task must still be in for the event to act
// (else it is a stale no-op), when it is due, why, and the how-manieth
// retry it is. Zero for an event that is no wait.
type Wait struct {
	ExpectedStatus  Status    `json:"expected_status,omitempty"`
	ExpectedVersion int64     `json:"expected_version,omitempty"`
	NotBefore       time.Time `json:"not_before,omitzero"`
	Reason          string    `json:"reason,omitempty"`
	RetryAttempt    int       `json:"retry_attempt,omitempty"`
	// WaitingSince is when the first try of the wait failed: the wait's
	// maximum counts from it.
	WaitingSince time.Time `json:"waiting_since,omitzero"`
}

// Waited is the wait a delayed payload carries (a payload embeds its
// Wait), for code that handles any payload.
func (w Wait) Waited() Wait { return w }

// Holds reports whether t is still in the state and version w expects: an
// event that is no wait always holds.
func (w Wait) Holds(t Task) bool {
	return w.ExpectedVersion == 0 || (t.Status == w.ExpectedStatus && t.Version == w.ExpectedVersion)
}
