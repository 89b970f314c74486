package rules

import (
	"strings"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Transcode is the transcode stage's rule for replay: what a replayed
// derivative step would do to the task as it is now, the background retry
// of a derivative a finished task went without included.
func Transcode() preview.Rule {
	return preview.RuleOf(catalog.EventPostprocess,
		func(_ envelope.Envelope, p task.Postprocess) (uuid.UUID, error) {
			if catalog.DerivativeKind(p.Step) == "" {
				return uuid.Nil, preview.Refusal("payload.invalid", "the transcode stage makes %s, %s and %s, not %q: it would quarantine the event again",
					catalog.TagTranscodeProxy, catalog.TagThumbnail, catalog.TagWaveform, p.Step)
			}
			return p.TaskID, nil
		}, decideTranscode)
}

func decideTranscode(s preview.State, p task.Postprocess) preview.Verdict {
	t, at, kind := s.Task, preview.At(s.Task), catalog.DerivativeKind(p.Step)
	if !task.TranscodeActs(t, kind) {
		return preview.StaleNoop.Because("transcode.stale", "the task is %s, not MEDIA_PROCESSING: the transcode stage would record a stale no-op", at)
	}
	if _, ok := s.Effects.Asset(p.AssetID); !ok {
		return preview.Refuse.Because("asset.wrong_task", "asset %s is not an output of task %s: the transcode stage would quarantine the event again", p.AssetID, t.ID)
	}
	if task.DerivativeRetryActs(t, kind) {
		return preview.Act.Because("transcode.background", "the task is %s without its %s: the transcode stage would make it from asset %s in the background, leaving the task's state as it is",
			at, strings.ToLower(kind), p.AssetID)
	}
	for _, a := range s.Effects.Assets {
		if a.SourceAssetID != nil && *a.SourceAssetID == p.AssetID && a.Kind == kind {
			return preview.Act.Because("transcode.record", "the task is %s and the %s of asset %s exists already (asset %s): the stage would record the step without making it again",
				at, kind, p.AssetID, a.AssetID)
		}
	}
	return preview.Act.Because("transcode.run", "the task is %s: the transcode stage would run step %s on asset %s", at, p.Step, p.AssetID)
}
