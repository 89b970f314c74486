package rules

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Notify is the notify stage's rule for replay: a replayed state change is
// pushed again, and changes no state.
func Notify() preview.Rule {
	return preview.RuleOf(catalog.EventTaskStateChanged,
		func(env envelope.Envelope, p task.StateChanged) (uuid.UUID, error) {
			if env.TenantID != p.TenantID.String() {
				return uuid.Nil, preview.Refusal("security.tenant_mismatch", "the state change names tenant %s but the event tenant %s: never replayed", p.TenantID, env.TenantID)
			}
			if p.RenderID != uuid.Nil {
				return uuid.Nil, preview.Refusal("replay.render", "a render's state change is not replayed: GET /v1/renders/%s shows render %s as it is", p.RenderID, p.RenderID)
			}
			if p.TaskID.String() != env.AggregateID {
				return uuid.Nil, preview.Refusal("payload.invalid", "state change of task %s arrived as an event about %s: the stage would quarantine it again", p.TaskID, env.AggregateID)
			}
			return p.TaskID, nil
		}, decideNotify)
}

func decideNotify(s preview.State, p task.StateChanged) preview.Verdict {
	return preview.Act.Because("notify.push", "the notify stage would push the change to %s v%d to the tenant's live subscribers; it changes no state, and a subscriber that has seen v%d (the task is %s) drops it",
		p.To, p.Version, s.Task.Version, preview.At(s.Task))
}
