package main

import (
	"math"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// histogram is one histogram series read back from a registry. The
// benchmark reads the pipeline's own Prometheus series: what it prints is
// what an operator's dashboard would show.
type histogram struct {
	bounds []float64 // bucket upper bounds, ascending, without +Inf
	counts []uint64  // cumulative count per bound
	count  uint64
	sum    float64
}

// add is h and o (same buckets) merged.
func (h histogram) add(o histogram) histogram {
	if h.bounds == nil {
		return histogram{bounds: o.bounds, counts: slices.Clone(o.counts), count: o.count, sum: o.sum}
	}
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), count: h.count + o.count, sum: h.sum + o.sum}
	for i := range out.counts {
		out.counts[i] += o.counts[i]
	}
	return out
}

// sub is what was observed between an earlier reading prev and h.
func (h histogram) sub(prev histogram) histogram {
	if prev.bounds == nil {
		return h
	}
	out := histogram{bounds: h.bounds, counts: slices.Clone(h.counts), count: h.count - prev.count, sum: h.sum - prev.sum}
	for i := range out.counts {
		out.counts[i] -= prev.counts[i]
	}
	return out
}

// quantile estimates the q-quantile as PromQL's histogram_quantile does:
// linearly inside the bucket that holds it. With buckets 1.4x apart it is
// within about 20% of the true value. NaN when nothing was observed; the
// highest bound when the quantile lies in the +Inf bucket.
func (h histogram) quantile(q float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	rank := q * float64(h.count)
	lower, below := 0.0, uint64(0)
	for i, upper := range h.bounds {
		if float64(h.counts[i]) >= rank {
			inBucket := h.counts[i] - below
			if inBucket == 0 {
				return upper
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(inBucket)
		}
		lower, below = upper, h.counts[i]
	}
	return h.bounds[len(h.bounds)-1]
}

// within is the share of observations at most bound, exact when bound is
// a bucket's upper bound; NaN when nothing was observed.
func (h histogram) within(bound float64) float64 {
	if h.count == 0 {
		return math.NaN()
	}
	var n uint64
	for i, upper := range h.bounds {
		if upper <= bound {
			n = h.counts[i]
		}
	}
	return float64(n) / float64(h.count)
}

// series is the label set of one gathered sample.
type series map[string]string

func (s series) key(labels []string) string {
	vals := make([]string, len(labels))
	for i, l := range labels {
		vals[i] = s[l]
	}
	return strings.Join(vals, "/")
}

// gatherHistograms reads the histograms of c, merged by the values of
// keyLabels ("" merges everything).
func gatherHistograms(c prometheus.Collector, keyLabels ...string) map[string]histogram {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	families, err := reg.Gather()
	if err != nil {
		panic(err) // the collectors are ours and consistent: a programming error
	}
	out := map[string]histogram{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := series{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			hm := m.GetHistogram()
			h := histogram{count: hm.GetSampleCount(), sum: hm.GetSampleSum()}
			for _, b := range hm.GetBucket() {
				if math.IsInf(b.GetUpperBound(), 1) {
					continue
				}
				h.bounds = append(h.bounds, b.GetUpperBound())
				h.counts = append(h.counts, b.GetCumulativeCount())
			}
			k := labels.key(keyLabels)
			out[k] = out[k].add(h)
		}
	}
	return out
}

// gatherCounters reads the counters named name among cs, summed by the
// values of keyLabels.
func gatherCounters(cs []prometheus.Collector, name string, keyLabels ...string) map[string]float64 {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(cs...)
	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := series{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels.key(keyLabels)] += m.GetCounter().GetValue()
		}
	}
	return out
}

// subHistograms is after minus before, series by series.
func subHistograms(after, before map[string]histogram) map[string]histogram {
	out := map[string]histogram{}
	for k, h := range after {
		if d := h.sub(before[k]); d.count > 0 {
			out[k] = d
		}
	}
	return out
}

// rusage is the CPU time of this process (self) or of its waited-for
// children.
func rusage(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestBenchHistogramQuantile(t *testing.T) {
	t.Parallel()
	// 10 observations in (0, 1], 80 in (1, 2], 10 in (2, 4].
	h := histogram{bounds: []float64{1, 2, 4}, counts: []uint64{10, 90, 100}, count: 100, sum: 170}
	require.InDelta(t, 1.5, h.quantile(0.5), 1e-9, "halfway through the (1, 2] bucket")
	require.InDelta(t, 0.5, h.quantile(0.05), 1e-9)
	require.InDelta(t, 3.8, h.quantile(0.99), 1e-9)
	require.InDelta(t, 0.9, h.within(2), 1e-9)
	require.InDelta(t, 0.9, h.within(3), 1e-9, "only whole buckets count")

	earlier := histogram{bounds: h.bounds, counts: []uint64{10, 10, 10}, count: 10, sum: 5}
	d := h.sub(earlier)
	require.Equal(t, []uint64{0, 80, 90}, d.counts)
	require.Equal(t, uint64(90), d.count)
	require.Equal(t, []uint64{10, 90, 100}, h.counts, "sub leaves its receiver alone")
	require.True(t, math.IsNaN(histogram{}.quantile(0.5)))
}
