package source

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/aivedio/pipeline/adapter/mq"
)

// wakeupLateness is process-wide and shared by every Metrics, like the
// inbox's counts: `go run ./local` runs a Source per consumer group without
// a registry, and its benchmark reads the lateness of all of them here.
// NewMetrics registers it beside the per-Source series, so a deployed
// adapter exports it with the rest.
var wakeupLateness = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "aivedio_adapter_wakeup_lateness_seconds",
	Help: "How long after its delivery time a DELAY-topic message (a poll, a resubmit, a reconcile) was received, " +
		"on its first delivery, by consumer group. Redeliveries are left out: their delay is the retry backoff.",
	// Tenths of a second around issue #4's goal (p99 <= 1.5 s), so that a
	// p99 read back from the buckets is within 0.05 s there and the share
	// on time is exact; coarse below (a broker's timer ticks in 100 ms or
	// 1 s) and above (a late wake-up is late).
	Buckets: []float64{.005, .01, .025, .05, .1, .2, .3, .4, .5, .6, .7, .8, .9, 1, 1.1, 1.2, 1.3, 1.4, 1.5,
		1.75, 2, 2.5, 3, 4, 5, 7.5, 10, 15, 30, 60, 120, 300, 600},
}, []string{"consumer_group"})

// WakeupLateness is aivedio_adapter_wakeup_lateness_seconds{consumer_group}
// for every Source of this process, for in-process readers that gather it
// through a registry of their own. NewMetrics registers it already: do not
// register it again on the same registry.
func WakeupLateness() prometheus.Collector { return wakeupLateness }

// observeLateness records how late the delayed messages of a batch received
// at now arrived. A message is late by the time the broker held it past its
// delivery time plus the wait for a free worker's Receive. One received
// early (the producer's clock ahead of the broker's) lands in the lowest
// bucket.
func observeLateness(late prometheus.Observer, batch []*mq.Received, now time.Time) {
	for _, msg := range batch {
		if msg.DeliveryTime.IsZero() || msg.DeliveryAttempt > 1 {
			continue
		}
		late.Observe(now.Sub(msg.DeliveryTime).Seconds())
	}
}
