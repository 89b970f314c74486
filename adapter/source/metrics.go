package source

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

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

// result is what became of one message, as counted in metrics.
type result uint8

const (
	resultAcked result = iota
	resultQuarantined
	resultRetry
	resultAbandoned
	resultHandedBack // not handled: an earlier message of its FIFO group was not settled, or it came as the source stopped
	nResults
)

var resultNames = [nResults]string{"acked", "quarantined", "retry", "abandoned", "handed_back"}

func (r result) String() string { return resultNames[r] }

// series are one Source's series, each looked up once rather than on every
// message; each appears when first used, as it would looked up each time.
type series struct {
	m    *Metrics
	name string // the consumer group

	gaugesOnce sync.Once
	gauges     groupGauges

	counts    [nResults]lazy[prometheus.Counter]
	latencies [nResults]lazy[prometheus.Observer]
}

type groupGauges struct {
	inFlight, buffered, bufferedBytes prometheus.Gauge
}

// lazy is a series looked up on first use.
type lazy[T any] struct {
	once sync.Once
	v    T
}

func (l *lazy[T]) get(lookup func() T) T {
	l.once.Do(func() { l.v = lookup() })
	return l.v
}

func newSeries(m *Metrics, group string) *series { return &series{m: m, name: group} }

// group is the group's gauges.
func (s *series) group() *groupGauges {
	s.gaugesOnce.Do(func() {
		s.gauges = groupGauges{
			inFlight:      s.m.inFlight.WithLabelValues(s.name),
			buffered:      s.m.buffered.WithLabelValues(s.name),
			bufferedBytes: s.m.bufferedB.WithLabelValues(s.name),
		}
	})
	return &s.gauges
}

// count counts the group's messages of result r.
func (s *series) count(r result) prometheus.Counter {
	return s.counts[r].get(func() prometheus.Counter { return s.m.deliveries.WithLabelValues(s.name, r.String()) })
}

// latency times the group's messages of result r.
func (s *series) latency(r result) prometheus.Observer {
	return s.latencies[r].get(func() prometheus.Observer { return s.m.latency.WithLabelValues(s.name, r.String()) })
}
