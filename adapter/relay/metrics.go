package relay

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the relay's Prometheus series.
type Metrics struct {
	published *prometheus.CounterVec
	failures  *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	pending   prometheus.Gauge
	oldest    prometheus.Gauge
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aivedio_relay_published_total",
			Help: "Outbox events published to the broker, by topic.",
		}, []string{"topic"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aivedio_relay_publish_failures_total",
			Help: "Failed publishes, by topic and error code (timeout, unauthenticated, forbidden, invalid_row, publish_failed); the row is retried with backoff.",
		}, []string{"topic", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aivedio_relay_publish_duration_seconds",
			Help:    "Duration of one synchronous publish, by topic, successful or not: its quantiles are the producer's send latency.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"topic"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aivedio_outbox_unpublished",
			Help: "Outbox rows not yet published.",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "aivedio_outbox_oldest_age_seconds",
			Help: "Age of the oldest unpublished outbox row; alert when it grows.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.published, m.failures, m.latency, m.pending, m.oldest)
	}
	return m
}

func (m *Metrics) observe(topic string, d time.Duration, err error) {
	m.latency.WithLabelValues(topic).Observe(d.Seconds())
	if err != nil {
		m.failures.WithLabelValues(topic, errorCode(err)).Inc()
		return
	}
	m.published.WithLabelValues(topic).Inc()
}
