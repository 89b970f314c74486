package render

import "github.com/prometheus/client_golang/prometheus"

// The stage's series are process-wide, like the stage framework's: a
// deployed function serves one stage per process.
var (
	duplicateRuns = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aivedio_render_duplicate_runs_prevented_total",
		Help: "Chunk deliveries that found their chunk claimed by another live delivery and started no second ffmpeg run.",
	})
	chunkOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aivedio_render_chunks_total",
		Help: "Chunk deliveries by outcome: stored, already_stored (a repeat found it done), stopped (the render ended), lease_lost, failed (retried), slot_wait (its tenant renders RENDER_TENANT_CHUNKS already; asked again later), slot_unavailable (Redis unreachable; rendered without a slot).",
	}, []string{"outcome"})
	reusedOutputs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aivedio_render_reused_outputs_total",
		Help: "Renders that ended with the output an identical render (same content key) stored before, without ffmpeg.",
	})
)

// Collectors export the render stage's series; register them once per
// registry.
func Collectors() []prometheus.Collector {
	return []prometheus.Collector{duplicateRuns, chunkOutcomes, reusedOutputs}
}
