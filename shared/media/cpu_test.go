package media_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/media/mediatest"
)

// mediaCounters gathers the media collectors as "metric tool operation" ->
// value.
func mediaCounters(t *testing.T) map[[3]string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(media.Collectors()...)
	families, err := reg.Gather()
	require.NoError(t, err)
	out := map[[3]string]float64{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[[3]string{mf.GetName(), labels["tool"], labels["operation"]}] = m.GetCounter().GetValue()
		}
	}
	return out
}

func TestChildCPUIsCounted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	clip := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second})
	// Other tests run children at the same time: the counts only grow, so
	// each is checked to have grown by at least this test's share.
	before, beforeSeries := media.CPUTotals(), mediaCounters(t)
	require.NoError(t, b.tool.ProxyH264(testCtx(t), clip, filepath.Join(t.TempDir(), "proxy.mp4")))
	spent, series := media.CPUTotals().Sub(before), mediaCounters(t)

	require.GreaterOrEqual(t, spent.Runs, int64(2), "ffprobe and ffmpeg ran")
	require.Positive(t, spent.Total(), "an H.264 encode takes CPU")
	grew := func(name, tool, op string) float64 {
		k := [3]string{name, tool, op}
		return series[k] - beforeSeries[k]
	}
	require.GreaterOrEqual(t, grew("aivedio_media_runs_total", "ffprobe", media.OpProxy), 1.0)
	require.GreaterOrEqual(t, grew("aivedio_media_runs_total", "ffmpeg", media.OpProxy), 1.0)
	require.Positive(t, grew("aivedio_media_cpu_seconds_total", "ffmpeg", media.OpProxy))
}
