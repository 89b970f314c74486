package api

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the API's Prometheus series. A nil *metrics records nothing.
type metrics struct {
	requests       *prometheus.HistogramVec
	streams        prometheus.Gauge
	streamsClosed  *prometheus.CounterVec
	listenFailures prometheus.Counter
	intakeLimited  *prometheus.CounterVec
	intakeErrors   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "api_request_duration_seconds",
			Help:    "Time to answer an API request, by route pattern and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "code"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "api_event_streams",
			Help: "Server-sent event streams open now.",
		}),
		streamsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_event_streams_closed_total",
			Help: "Event streams the server closed, by reason (too_slow, listener_lost, shutdown).",
		}, []string{"reason"}),
		listenFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "api_event_listener_failures_total",
			Help: "Times the Redis subscription behind the event streams failed and was renewed.",
		}),
		intakeLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "api_intake_rate_limited_total",
			Help: "New generations, renders and uploads refused 429 rate_limited, by priority class (the lowest priority of the class in API_TENANT_RATE).",
		}, []string{"class"}),
		intakeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "api_intake_unchecked_total",
			Help: "New work let in without an intake check because Redis did not answer.",
		}),
	}
	reg.MustRegister(m.requests, m.streams, m.streamsClosed, m.listenFailures, m.intakeLimited, m.intakeErrors)
	return m
}

func (m *metrics) observe(route string, status int, d time.Duration) {
	if m != nil {
		m.requests.WithLabelValues(route, strconv.Itoa(status)).Observe(d.Seconds())
	}
}

func (m *metrics) streamOpened() {
	if m != nil {
		m.streams.Inc()
	}
}

func (m *metrics) streamEnded() {
	if m != nil {
		m.streams.Dec()
	}
}

func (m *metrics) streamClosed(reason string) {
	if m != nil {
		m.streamsClosed.WithLabelValues(reason).Inc()
	}
}

func (m *metrics) listenFailed() {
	if m != nil {
		m.listenFailures.Inc()
	}
}

func (m *metrics) intakeRefused(class int) {
	if m != nil {
		m.intakeLimited.WithLabelValues(strconv.Itoa(class)).Inc()
	}
}

func (m *metrics) intakeUnchecked() {
	if m != nil {
		m.intakeErrors.Inc()
	}
}
