package rules

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Probe is the probe stage's rule for replay: what a replayed probe step
// would do to the task as it is now.
func Probe() preview.Rule {
	return preview.RuleOf(catalog.EventPostprocess,
		func(_ envelope.Envelope, p task.Postprocess) (uuid.UUID, error) {
			if p.Step != catalog.TagProbe {
				return uuid.Nil, preview.Refusal("payload.invalid", "the probe stage handles step %s, not %q: it would quarantine the event again", catalog.TagProbe, p.Step)
			}
			return p.TaskID, nil
		}, decideProbe)
}

func decideProbe(s preview.State, p task.Postprocess) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	if !task.PostprocessActs(t) {
		return preview.StaleNoop.Because("probe.stale", "the task is %s, not MEDIA_PROCESSING: the probe stage would record a stale no-op", at)
	}
	if _, ok := s.Effects.Asset(p.AssetID); !ok {
		return preview.Refuse.Because("asset.wrong_task", "asset %s is not an output of task %s: the probe stage would quarantine the event again", p.AssetID, t.ID)
	}
	return preview.Act.Because("probe.run", "the task is %s: the probe stage would run step %s on asset %s", at, p.Step, p.AssetID)
}
