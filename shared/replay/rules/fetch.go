package rules

import (
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Fetch is the fetch stage's rule for replay: what a replayed fetch
// request would do to the task as it is now, the output already stored
// included.
func Fetch() preview.Rule {
	return preview.RuleOf(catalog.EventFetchRequested, preview.PayloadTask, decideFetch)
}

func decideFetch(s preview.State, p task.FetchRequested) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	if !task.FetchActs(t) {
		return preview.StaleNoop.Because("fetch.stale", "the task is %s, not FETCHING: the fetch stage would record a stale no-op", at)
	}
	if !p.Holds(t) {
		return preview.StaleNoop.Because("fetch.stale", "the delayed fetch expects the task %s at version %d, and it is %s: the fetch stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at)
	}
	for _, a := range s.Effects.Assets {
		if a.Kind == "SOURCE" {
			return preview.Act.Because("fetch.record", "the task is %s and its output is stored already as asset %s: the fetch stage would find it and move on without storing it twice",
				at, a.AssetID)
		}
	}
	return preview.Act.Because("fetch.store", "the task is %s: the fetch stage would download job %s's output once and store it", at, t.ProviderJobID)
}
