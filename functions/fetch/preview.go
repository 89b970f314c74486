package fetch

import (
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// Preview is the stage's rule for replay: what a replayed fetch request
// would do to the task as it is now, the output already stored included.
func Preview() replay.Rule {
	return replay.RuleOf(catalog.EventFetchRequested, replay.PayloadTask, preview)
}

func preview(s replay.State, p task.FetchRequested) replay.Verdict {
	t, at := s.Task, replay.At(s.Task)
	if !task.FetchActs(t) {
		return replay.StaleNoop.Because("fetch.stale", "the task is %s, not FETCHING: the fetch stage would record a stale no-op", at)
	}
	if !p.Holds(t) {
		return replay.StaleNoop.Because("fetch.stale", "the delayed fetch expects the task %s at version %d, and it is %s: the fetch stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at)
	}
	for _, a := range s.Effects.Assets {
		if a.Kind == "SOURCE" {
			return replay.Act.Because("fetch.record", "the task is %s and its output is stored already as asset %s: the fetch stage would find it and move on without storing it twice",
				at, a.AssetID)
		}
	}
	return replay.Act.Because("fetch.store", "the task is %s: the fetch stage would download job %s's output once and store it", at, t.ProviderJobID)
}
