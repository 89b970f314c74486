package notify

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// Preview is the stage's rule for replay: a replayed state change is
// pushed again, and changes no state.
func Preview() replay.Rule {
	return replay.RuleOf(catalog.EventTaskStateChanged,
		func(env envelope.Envelope, p task.StateChanged) (uuid.UUID, error) {
			if env.TenantID != p.TenantID.String() {
				return uuid.Nil, replay.Refusal("security.tenant_mismatch", "the state change names tenant %s but the event tenant %s: never replayed", p.TenantID, env.TenantID)
			}
			if p.TaskID.String() != env.AggregateID {
				return uuid.Nil, replay.Refusal("payload.invalid", "state change of task %s arrived as an event about %s: the stage would quarantine it again", p.TaskID, env.AggregateID)
			}
			return p.TaskID, nil
		}, preview)
}

func preview(s replay.State, p task.StateChanged) replay.Verdict {
	return replay.Act.Because("notify.push", "the notify stage would push the change to %s v%d to the tenant's live subscribers; it changes no state, and a subscriber that has seen v%d (the task is %s) drops it",
		p.To, p.Version, s.Task.Version, replay.At(s.Task))
}
