package inbox

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/shared/envelope"
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

// endToEnd is the time from an event's occurred_at to the commit of the
// transaction that applied it, by event type and consumer group: the
// whole chain's latency for that hop (outbox, relay, broker, adapter,
// stage). An event of a DELAY topic includes its wait.
var endToEnd = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "aivedio_event_end_to_end_seconds",
	Help: "From an event's occurred_at to the commit that applied it (or recorded it stale), by event type and consumer group; delayed events include their wait.",
	// 5 ms to about 2 h, doubling: a hop of milliseconds and a poll delayed
	// by minutes both land in a bucket.
	Buckets: prometheus.ExponentialBuckets(0.005, 2, 21),
}, []string{"event_type", "consumer_group"})

// ReplayProducer is the producer of replayed events (replay.Producer):
// what such an event did at its consumer is the real effect of a replay.
const ReplayProducer = "replay"

var replayed = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "aivedio_replayed_events_total",
	Help: "Replayed events (producer replay) as their consumer group took them: applied (the replay caused a real effect), stale_noop, duplicate.",
}, []string{"consumer_group", "outcome"})

// observe counts out and, for an event the function ran on, its end-to-end
// latency.
func observe(consumer string, ev envelope.Envelope, out Outcome) {
	count(out)
	if ev.Producer == ReplayProducer {
		outcome := "applied"
		switch {
		case out.Duplicate:
			outcome = "duplicate"
		case out.Result == StaleNoop:
			outcome = "stale_noop"
		}
		replayed.WithLabelValues(consumer, outcome).Inc()
	}
	if !out.Duplicate && !ev.OccurredAt.IsZero() {
		endToEnd.WithLabelValues(ev.EventType, consumer).Observe(max(time.Since(ev.OccurredAt).Seconds(), 0))
	}
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

// Collector exports the counts as aivedio_inbox_outcomes_total{outcome},
// aivedio_event_end_to_end_seconds{event_type,consumer_group} and
// aivedio_replayed_events_total{consumer_group,outcome}.
func Collector() prometheus.Collector { return collector{} }

type collector struct{}

var outcomesDesc = prometheus.NewDesc("aivedio_inbox_outcomes_total",
	"Inbox transactions by outcome: applied, stale_noop, or duplicate (a redelivery absorbed without running).",
	[]string{"outcome"}, nil)

func (collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outcomesDesc
	endToEnd.Describe(ch)
	replayed.Describe(ch)
}

func (collector) Collect(ch chan<- prometheus.Metric) {
	c := Totals()
	ch <- prometheus.MustNewConstMetric(outcomesDesc, prometheus.CounterValue, float64(c.Applied), "applied")
	ch <- prometheus.MustNewConstMetric(outcomesDesc, prometheus.CounterValue, float64(c.StaleNoops), "stale_noop")
	ch <- prometheus.MustNewConstMetric(outcomesDesc, prometheus.CounterValue, float64(c.Duplicates), "duplicate")
	endToEnd.Collect(ch)
	replayed.Collect(ch)
}
