package media

import (
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Operations, as labelled in the CPU series: the call a tool ran for. The
// probe that every derivative starts with counts under the derivative.
const (
	OpProbe     = "probe"
	OpProxy     = "proxy"
	OpThumbnail = "thumbnail"
	OpWaveform  = "waveform"
)

// CPU is CPU time spent by ffmpeg and ffprobe children.
type CPU struct {
	Runs   int64 // children that ran (succeeded, failed or killed)
	User   time.Duration
	System time.Duration
}

// Total is user plus system time.
func (c CPU) Total() time.Duration { return c.User + c.System }

// Sub is the CPU spent between an earlier reading prev and c.
func (c CPU) Sub(prev CPU) CPU {
	return CPU{Runs: c.Runs - prev.Runs, User: c.User - prev.User, System: c.System - prev.System}
}

// The children's CPU is counted process-wide, like the inbox's counts: a
// Tool is a pair of paths that stages copy freely, and the question asked
// is what media work cost this process, apart from its own CPU (which
// getrusage(RUSAGE_SELF) reports without the children).
var (
	cpuRuns, cpuUser, cpuSystem atomic.Int64

	cpuSeconds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aivedio_media_cpu_seconds_total",
		Help: "User plus system CPU time of ffmpeg and ffprobe children, by tool and operation (probe, proxy, thumbnail, waveform).",
	}, []string{"tool", "operation"})
	toolRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aivedio_media_runs_total",
		Help: "ffmpeg and ffprobe children run, by tool and operation, whatever their outcome.",
	}, []string{"tool", "operation"})
)

// CPUTotals returns the CPU time of every child this process's Tools ran
// since it started.
func CPUTotals() CPU {
	return CPU{Runs: cpuRuns.Load(), User: time.Duration(cpuUser.Load()), System: time.Duration(cpuSystem.Load())}
}

// Collectors export aivedio_media_cpu_seconds_total{tool,operation} and
// aivedio_media_runs_total{tool,operation} for every Tool of this process.
// Register them once per registry.
func Collectors() []prometheus.Collector { return []prometheus.Collector{cpuSeconds, toolRuns} }

// countCPU records what an exited child used. A child that never started
// has no state and cost nothing.
func countCPU(tool, op string, ps *os.ProcessState) {
	if ps == nil {
		return
	}
	user, sys := ps.UserTime(), ps.SystemTime()
	cpuRuns.Add(1)
	cpuUser.Add(int64(user))
	cpuSystem.Add(int64(sys))
	cpuSeconds.WithLabelValues(tool, op).Add((user + sys).Seconds())
	toolRuns.WithLabelValues(tool, op).Inc()
}
