package rules

import (
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
)

// All returns the rules by the consumer group each serves. A group
// without a rule is refused for replay (replay.no_rule); every group of
// the catalog has one.
func All() preview.Rules {
	return preview.Rules{
		catalog.GroupSubmit.Name:    Submit(),
		catalog.GroupPoll.Name:      Poll(),
		catalog.GroupCallback.Name:  Callback(),
		catalog.GroupFetch.Name:     Fetch(),
		catalog.GroupProbe.Name:     Probe(),
		catalog.GroupTranscode.Name: Transcode(),
		catalog.GroupReview.Name:    Review(),
		catalog.GroupRender.Name:    Render(),
		catalog.GroupSettle.Name:    Settle(),
		catalog.GroupNotify.Name:    Notify(),
		catalog.GroupReconcile.Name: Reconcile(),
	}
}
