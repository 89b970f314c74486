package preview

import (
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/task"
)

// State is what a rule decides from: the event, the task it targets as it
// is now, what was done for the task already, and the database's clock.
type State struct {
	Env     envelope.Envelope
	Task    task.Task
	Effects Effects
	Now     time.Time
}

// Rule is how one consumer group treats the one event type it handles.
// Make one with [RuleOf].
type Rule struct {
	eventType string
	// parse reads the payload as strictly as the stage does and names the
	// task it targets; an error is a refusal.
	parse func(env envelope.Envelope) (Target, error)
}

// Rules are the rules of a build, by consumer group name. A group without
// one (no stage consumes it in the build) is refused with replay.no_rule.
type Rules map[string]Rule

// Target is the task an event is about, and the decision once its state
// is known.
type Target struct {
	TaskID uuid.UUID
	decide func(s State) Verdict
}

// Decide gives the verdict on the target in state s.
func (t Target) Decide(s State) Verdict { return t.decide(s) }

// RuleOf builds the rule of a stage whose payload is T. The payload is
// decoded as the stage decodes it (a payload that does not fit is
// refused); taskOf names the task the event is about, or returns a
// [Refusal] when the stage would refuse the event whatever the task's
// state; decide gives the verdict from the state.
func RuleOf[T any](eventType string, taskOf func(envelope.Envelope, T) (uuid.UUID, error), decide func(State, T) Verdict) Rule {
	return Rule{eventType: eventType, parse: func(env envelope.Envelope) (Target, error) {
		p, err := envelope.DecodePayload[T](env)
		if err != nil {
			return Target{}, Refusal("payload.invalid", "the payload of %s does not fit its schema (%v): the stage would quarantine it again", env.EventType, err)
		}
		id, err := taskOf(env, p)
		if err != nil {
			return Target{}, err
		}
		return Target{TaskID: id, decide: func(s State) Verdict { return decide(s, p) }}, nil
	}}
}

// PayloadTask is the taskOf of a payload that names its task, as
// task.SubmitRequested and the other stage payloads do.
func PayloadTask[T interface{ TaskRef() uuid.UUID }](_ envelope.Envelope, p T) (uuid.UUID, error) {
	return p.TaskRef(), nil
}

// EventType is the event type the rule handles.
func (r Rule) EventType() string { return r.eventType }

// Parse reads env as the rule's stage would and names the task it is
// about. A refusal comes back as its verdict; the target is then empty.
func (r Rule) Parse(env envelope.Envelope) (Target, *Verdict) {
	t, err := r.parse(env)
	if err == nil {
		return t, nil
	}
	var refused refusal
	if errors.As(err, &refused) {
		v := Verdict(refused)
		return Target{}, &v
	}
	v := Refuse.Because("payload.invalid", "%v", err)
	return Target{}, &v
}

// At names a task's state and version in a reason: "FETCHING (v5)".
func At(t task.Task) string { return fmt.Sprintf("%s (v%d)", t.Status, t.Version) }
