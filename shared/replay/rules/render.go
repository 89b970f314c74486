package rules

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Render is the render stage's rule for replay: the desk replays events
// about generation tasks, and a render is none. A render that stopped
// moving is re-asked by the reconciler's render scanner, which knows its
// chunks; a quarantined render event is refused with that reason.
func Render() preview.Rule {
	return preview.RuleOf(catalog.EventRenderRequested,
		func(_ envelope.Envelope, p task.RenderRequested) (uuid.UUID, error) {
			return uuid.Nil, preview.Refusal("replay.render", "render %s is not a generation task: the reconciler re-asks a render's stuck steps (chunks past their lease, an unjoined render); read it with GET /v1/renders/%s", p.RenderID, p.RenderID)
		},
		func(_ preview.State, p task.RenderRequested) preview.Verdict {
			return preview.Refuse.Because("replay.render", "render %s is not a generation task", p.RenderID)
		})
}
