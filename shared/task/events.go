package task

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
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

// Payloads of the task events. They carry ids and versions only (DESIGN.md
// §2): a handler reads the facts from the database. A field tagged
// `payload:"required"` must be present and non-zero (envelope.DecodePayload);
// a field added later must be optional, so that the consumers of the
// release before read the payload too.
type (
	// SubmitRequested asks the submit stage to (re)submit a task.
	SubmitRequested struct {
		TaskID  uuid.UUID `json:"task_id" payload:"required"`
		Version int64     `json:"version"`
	}
	// PollDue asks the poll stage to check the provider job of an attempt.
	// PollAt identifies the poll chain: a message whose PollAt is not the
	// task's next_poll_at is stale.
	PollDue struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		AttemptID uuid.UUID `json:"attempt_id" payload:"required"`
		PollAt    time.Time `json:"poll_at"`
	}
	// CallbackReceived carries a verified provider callback to the poll stage.
	CallbackReceived struct {
		Provider      string `json:"provider"`
		ProviderJobID string `json:"provider_job_id"`
	}
	// FetchRequested asks the fetch stage to store an attempt's output.
	FetchRequested struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		AttemptID uuid.UUID `json:"attempt_id"`
	}
	// Postprocess asks for one media step (the tag) on an asset.
	Postprocess struct {
		TaskID  uuid.UUID `json:"task_id" payload:"required"`
		AssetID uuid.UUID `json:"asset_id" payload:"required"`
		Step    string    `json:"step"`
	}
	// SettleRequested asks billing to capture or release a task's
	// reservation, decided by the task's terminal state.
	SettleRequested struct {
		TaskID uuid.UUID `json:"task_id" payload:"required"`
		Status Status    `json:"status"`
	}
	// StateChanged announces a committed transition.
	StateChanged struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		TenantID  uuid.UUID `json:"tenant_id" payload:"required"`
		From      Status    `json:"from,omitempty"`
		To        Status    `json:"to" payload:"required"`
		Version   int64     `json:"version"`
		Progress  int       `json:"progress"`
		ErrorCode string    `json:"error_code,omitempty"`
		At        time.Time `json:"at"`
	}
	// ReconcileDue asks the reconciler to look at a task.
	ReconcileDue struct {
		TaskID    uuid.UUID `json:"task_id" payload:"required"`
		AttemptID uuid.UUID `json:"attempt_id,omitempty" payload:"required"`
		Reason    string    `json:"reason"`
		Round     int       `json:"round,omitempty"` // lookups already made for this attempt
	}
)

// Event builds an outbox event about task t caused by o. deliverAt is set
// only for DELAY topics; tag defaults to the event type.
func (o Origin) Event(t Task, eventType string, topic catalog.Topic, tag string, payload any, deliverAt time.Time) (outbox.Event, error) {
	env, err := envelope.New(envelope.NewParams{
		EventType:     eventType,
		Producer:      o.Producer,
		AggregateType: AggregateType,
		AggregateID:   t.ID.String(),
		TenantID:      t.TenantID.String(),
		TraceID:       o.TraceID,
		CorrelationID: o.correlation(t),
		CausationID:   o.EventID,
		Payload:       payload,
	})
	if err != nil {
		return outbox.Event{}, fmt.Errorf("build %s event: %w", eventType, err)
	}
	ev := outbox.Event{Envelope: env, Topic: topic, Tag: tag}
	switch topic.Type {
	case catalog.FIFO:
		ev.MessageGroup = t.ID.String()
	case catalog.Delay:
		ev.DeliverAt = deliverAt
	}
	return ev, nil
}

// correlation is the origin's correlation id, or the task id when the
// origin has none (the API call that creates the task starts the chain).
func (o Origin) correlation(t Task) string {
	if o.CorrelationID != "" {
		return o.CorrelationID
	}
	return t.ID.String()
}

// Delay returns when a DELAY-topic event due after d should be delivered,
// clamped to the broker's maximum.
func Delay(now time.Time, d time.Duration) time.Time {
	if d > outbox.MaxDelay-time.Minute {
		d = outbox.MaxDelay - time.Minute
	}
	if d < 0 {
		d = 0
	}
	return now.Add(d)
}
