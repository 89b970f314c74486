package waitlist

import "github.com/prometheus/client_golang/prometheus"

// The causes of aivedio_waitlist_wakeups_total.
const (
	causeRelease = "release" // a job's end handed its slot over
	causeIdle    = "idle"    // room found without a release: a lost wake-up repaired, a wait that committed after a release, a resume
)

var (
	joins = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "aivedio_waitlist_joins_total",
		Help: "Submits that found their slot scope full (or paused) and joined the wait list, in this process.",
	})
	wakeups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aivedio_waitlist_wakeups_total",
		Help: "Waiting tasks handed a slot and woken by this process: cause=release (a job's end handed its slot over) or idle (room found otherwise: a lost wake-up repaired, a resume).",
	}, []string{"cause"})
)

// Collectors export the wait list's counters; register them once per
// registry.
func Collectors() []prometheus.Collector { return []prometheus.Collector{joins, wakeups} }
