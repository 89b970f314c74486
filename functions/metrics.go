package functions

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/review"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/progress"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// StageCollectors are the process-wide collectors of the code the stages
// run, as each package declares them: the stage framework's work time,
// the inbox's outcomes, provider identity checks and failovers (submit,
// poll, reconcile), progress merges (poll), ffmpeg CPU (probe, transcode,
// review, render), render chunks, reviewer calls, the slot wait list's
// joins and wake-ups (submit, poll, reconcile), and the replay desk's
// steps (the reconcile scan records applied replays). The function binary
// serves them whatever its STAGE, and local, which runs every stage in one
// process, serves the same list: a collector added here reaches both.
func StageCollectors() []prometheus.Collector {
	return slices.Concat(
		[]prometheus.Collector{stage.Collector(), inbox.Collector(), progress.Collector(), replay.Collector()},
		provider.Collectors(), media.Collectors(), render.Collectors(), review.Collectors(), waitlist.Collectors())
}

// APICollectors are the process-wide collectors of the code the API runs,
// beside the series each API server registers itself (api.Options'
// Registerer): the identity check of provider callbacks, and the replay
// desk's steps (the admin routes). The api binary serves them, and local,
// which runs the API too.
func APICollectors() []prometheus.Collector {
	return []prometheus.Collector{provider.IdentityCollector(), replay.Collector()}
}
