package rules

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Review is the review stage's rule for replay: what a replayed REVIEW
// would do to the task as it is now. The review's own row (task_reviews)
// is not part of the preview's state, so an act verdict says what decides
// it.
func Review() preview.Rule {
	return preview.RuleOf(catalog.EventPostprocess,
		func(_ envelope.Envelope, p task.Postprocess) (uuid.UUID, error) {
			if p.Step != catalog.TagReview {
				return uuid.Nil, preview.Refusal("payload.invalid", "the review stage handles step %s, not %q: it would quarantine the event again", catalog.TagReview, p.Step)
			}
			return p.TaskID, nil
		}, decideReview)
}

func decideReview(s preview.State, p task.Postprocess) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	if !task.PostprocessActs(t) {
		return preview.StaleNoop.Because("review.stale", "the task is %s, not MEDIA_PROCESSING: the review stage would record a stale no-op", at)
	}
	if _, ok := s.Effects.Asset(p.AssetID); !ok {
		return preview.Refuse.Because("asset.wrong_task", "asset %s is not an output of task %s: the review stage would quarantine the event again", p.AssetID, t.ID)
	}
	return preview.Act.Because("review.call", "the task is %s: if its content review is still open after %d calls (task_reviews), the review stage would call the reviewer; otherwise it records a no-op",
		at, p.RetryAttempt)
}
