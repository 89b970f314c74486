package source

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the adapter's Prometheus series.
type Metrics struct {
	deliveries  *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	inFlight    *prometheus.GaugeVec
	buffered    *prometheus.GaugeVec
	bufferedB   *prometheus.GaugeVec
	quarantined *prometheus.CounterVec
	lateness    *prometheus.HistogramVec // process-wide: see WakeupLateness
}

// NewMetrics creates the series and registers them with reg (nil: not
// registered, for tests and embedded use). The wake-up lateness histogram is
// the process-wide one of [WakeupLateness], registered with the rest.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aivedio_adapter_deliveries_total",
			Help: "Messages handled, by consumer group and result (acked, quarantined, retry, abandoned).",
		}, []string{"consumer_group", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "aivedio_adapter_delivery_duration_seconds",
			Help:    "From receive to settlement of one message.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"consumer_group", "result"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aivedio_adapter_in_flight",
			Help: "Messages being delivered now.",
		}, []string{"consumer_group"}),
		buffered: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aivedio_adapter_buffered_messages",
			Help: "Messages received from the broker and not settled yet: being delivered, or waiting behind an earlier message of their FIFO group.",
		}, []string{"consumer_group"}),
		bufferedB: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "aivedio_adapter_buffered_bytes",
			Help: "Body bytes of aivedio_adapter_buffered_messages.",
		}, []string{"consumer_group"}),
		quarantined: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "aivedio_adapter_quarantined_total",
			Help: "Messages written to message_quarantine, by consumer group and error code.",
		}, []string{"consumer_group", "error_code"}),
		lateness: wakeupLateness,
	}
	if reg != nil {
		reg.MustRegister(m.deliveries, m.latency, m.inFlight, m.buffered, m.bufferedB, m.quarantined, m.lateness)
	}
	return m
}
