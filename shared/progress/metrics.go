package progress

import "github.com/prometheus/client_golang/prometheus"

// merges counts the merges this process wrote; the live writes, one per
// poll, are not counted: they are the poll stage's own work.
var merges = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "aivedio_progress_merges_total",
	Help: "Live progress values of running provider jobs written to PostgreSQL (by PROGRESS_MERGE_STEP, PROGRESS_MERGE_INTERVAL or the job's end); the rest stayed in Redis.",
})

// Collector exports aivedio_progress_merges_total; register it once per
// registry.
func Collector() prometheus.Collector { return merges }
