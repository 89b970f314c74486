package replay

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/task"
)

// A replay's verdict previews what the consumer's stage would do with the
// event. The stages supply that preview themselves, beside their own code
// (functions.ReplayRules gathers them; shared/ may not import functions/),
// so a stage that changes what it does changes its preview in the same
// place. The verdict stays a preview: the stage's versioned checks and the
// business keys are the guarantee.

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
	parse func(env envelope.Envelope) (target, error)
}

// Rules are the rules of a build, by consumer group name. A group without
// one (no stage consumes it in the build) is refused with replay.no_rule.
type Rules map[string]Rule

// target is the task an event is about, and the decision once its state
// is known.
type target struct {
	taskID uuid.UUID
	decide func(s State) Verdict
}

// RuleOf builds the rule of a stage whose payload is T. The payload is
// decoded as the stage decodes it (a payload that does not fit is
// refused); taskOf names the task the event is about, or returns a
// [Refusal] when the stage would refuse the event whatever the task's
// state; decide gives the verdict from the state.
func RuleOf[T any](eventType string, taskOf func(envelope.Envelope, T) (uuid.UUID, error), decide func(State, T) Verdict) Rule {
	return Rule{eventType: eventType, parse: func(env envelope.Envelope) (target, error) {
		p, err := envelope.DecodePayload[T](env)
		if err != nil {
			return target{}, Refusal("payload.invalid", "the payload of %s does not fit its schema (%v): the stage would quarantine it again", env.EventType, err)
		}
		id, err := taskOf(env, p)
		if err != nil {
			return target{}, err
		}
		return target{taskID: id, decide: func(s State) Verdict { return decide(s, p) }}, nil
	}}
}

// PayloadTask is the taskOf of a payload that names its task, as
// task.SubmitRequested and the other stage payloads do.
func PayloadTask[T interface{ TaskRef() uuid.UUID }](_ envelope.Envelope, p T) (uuid.UUID, error) {
	return p.TaskRef(), nil
}

// EventType is the event type the rule handles.
func (r Rule) EventType() string { return r.eventType }

// Because is the verdict a with a stable code and the reason a person
// reads: replay.StaleNoop.Because("fetch.stale", "the task is %s", ...).
func (a Action) Because(code, format string, args ...any) Verdict {
	return Verdict{Action: a, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// Refusal is a refusal as an error, for a rule's taskOf: the plan ends
// with that verdict.
func Refusal(code, format string, args ...any) error {
	return refusal(Refuse.Because(code, format, args...))
}

// refusal is a verdict that ends the plan early.
type refusal Verdict

func (r refusal) Error() string { return r.Reason }

// At names a task's state and version in a reason: "FETCHING (v5)".
func At(t task.Task) string { return fmt.Sprintf("%s (v%d)", t.Status, t.Version) }

// Asset finds one of the task's assets.
func (e Effects) Asset(id uuid.UUID) (Asset, bool) {
	for _, a := range e.Assets {
		if a.AssetID == id {
			return a, true
		}
	}
	return Asset{}, false
}
