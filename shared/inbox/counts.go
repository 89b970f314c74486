package inbox

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Counts are what this process's inbox transactions decided since start.
type Counts struct {
	Applied    int64 // the function ran and its effect committed
	StaleNoops int64 // the function ran and found the event stale
	Duplicates int64 // the event was processed before: nothing ran
}

var applied, staleNoops, duplicates atomic.Int64

// Totals returns the process's counts so far: the demo's "duplicate
// deliveries absorbed".
func Totals() Counts {
	return Counts{Applied: applied.Load(), StaleNoops: staleNoops.Load(), Duplicates: duplicates.Load()}
}

func count(out Outcome) {
	switch {
	case out.Duplicate:
		duplicates.Add(1)
	case out.Result == StaleNoop:
		staleNoops.Add(1)
	default:
		applied.Add(1)
	}
}

// Collector exports the counts as aivedio_inbox_outcomes_total{outcome}.
func Collector() prometheus.Collector { return collector{} }

type collector struct{}

var outcomesDesc = prometheus.NewDesc("aivedio_inbox_outcomes_total",
	"Inbox transactions by outcome: applied, stale_noop, or duplicate (a redelivery absorbed without running).",
	[]string{"outcome"}, nil)

func (collector) Describe(ch chan<- *prometheus.Desc) { ch <- outcomesDesc }

func (collector) Collect(ch chan<- prometheus.Metric) {
	c := Totals()
	ch <- prometheus.MustNewConstMetric(outcomesDesc, prometheus.CounterValue, float64(c.Applied), "applied")
	ch <- prometheus.MustNewConstMetric(outcomesDesc, prometheus.CounterValue, float64(c.StaleNoops), "stale_noop")
	ch <- prometheus.MustNewConstMetric(outcomesDesc, prometheus.CounterValue, float64(c.Duplicates), "duplicate")
}
