package functions

import (
	"github.com/aivedio/pipeline/functions/fetch"
	"github.com/aivedio/pipeline/functions/notify"
	"github.com/aivedio/pipeline/functions/poll"
	"github.com/aivedio/pipeline/functions/probe"
	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/review"
	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/functions/transcode"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/preview"
)

// ReplayRules are the previews the built stages supply for replay, by the
// consumer group each serves: what a replayed event would do, decided next
// to the stage's code. A group whose stage is not built (render) has none,
// and its messages are refused for replay.
func ReplayRules() preview.Rules {
	return preview.Rules{
		catalog.GroupSubmit.Name:    submit.Preview(),
		catalog.GroupPoll.Name:      poll.Preview(),
		catalog.GroupCallback.Name:  poll.CallbackPreview(),
		catalog.GroupFetch.Name:     fetch.Preview(),
		catalog.GroupProbe.Name:     probe.Preview(),
		catalog.GroupTranscode.Name: transcode.Preview(),
		catalog.GroupReview.Name:    review.Preview(),
		catalog.GroupRender.Name:    render.Preview(),
		catalog.GroupSettle.Name:    settle.Preview(),
		catalog.GroupNotify.Name:    notify.Preview(),
		catalog.GroupReconcile.Name: reconcile.Preview(),
	}
}
