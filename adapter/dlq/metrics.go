package dlq

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the drainer's Prometheus series.
type Metrics struct {
	drained *prometheus.CounterVec
	errors  *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered, for tests and embedded use).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		drained: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aivedio_dlq_drained_total",
			Help: "Dead letters recorded in message_quarantine and ACKed, by consumer group (firm name).",
		}, []string{"consumer_group"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aivedio_dlq_drain_errors_total",
			Help: "Failed drain cycles (open, receive or quarantine write), by consumer group; the drainer retries.",
		}, []string{"consumer_group"}),
	}
	if reg != nil {
		reg.MustRegister(m.drained, m.errors)
	}
	return m
}
