package replay

import "github.com/prometheus/client_golang/prometheus"

// The labels of aivedio_replays_total beside the steps' own names
// (StepPlanned, StepApproved, StepRefused, StepExecuted).
const (
	metricDiscarded = "discarded"
	metricApplied   = "applied"
)

// replays counts the desk's committed steps in this process (the API's
// admin endpoints, or one CLI run); message_replays keeps every step for
// good. What a replayed event then did at its consumer is
// aivedio_replayed_events_total (package inbox).
var replays = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "aivedio_replays_total",
	Help: "Replay steps committed by this process: planned (dry runs), approved, refused (at approval or execution), executed (a replay event written), applied (its consumer committed it and the after-snapshot was recorded), discarded (a quarantined message closed without a replay).",
}, []string{"step"})

func countStep(step string) { replays.WithLabelValues(step).Inc() }

// Collector exports aivedio_replays_total{step}; register it once per
// registry.
func Collector() prometheus.Collector { return replays }

// countDecision counts an approval, or a refusal when s is REJECTED.
func countDecision(s Status) {
	if s == StatusRejected {
		countStep(StepRefused)
		return
	}
	countStep(StepApproved)
}
