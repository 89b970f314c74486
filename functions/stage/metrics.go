package stage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcomes of one Handle, as labelled in aivedio_stage_work_duration_seconds.
// They are the adapter's three actions (docs/design.md §6), not the finer error
// codes: a label per code would grow without bound.
const (
	OutcomeOK        = "ok"        // answered 2xx: the adapter ACKs
	OutcomePermanent = "permanent" // answered 4xx: quarantined
	OutcomeRetryable = "retryable" // answered 5xx: redelivered later
)

// workSeconds is process-wide, like the inbox's counts: a deployed
// function serves one stage per process, and `go run ./local` serves every
// stage in one process, told apart by the stage label. Functions are built
// by a constructor table that takes no registry, so a per-Function series
// would have nowhere to be registered.
var workSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name: "aivedio_stage_work_duration_seconds",
	Help: "Wall time of one event in a stage function, from the envelope check to the answer " +
		"(database, provider, S3 and ffmpeg included), by stage and outcome (ok, permanent, retryable).",
	// From 1 ms to 5 min, about 1.4x apart: narrow enough that a quantile
	// read back from the buckets is within ~20%, and a render or transcode
	// of minutes still lands in a bucket.
	Buckets: prometheus.ExponentialBucketsRange(0.001, 300, 36),
}, []string{"stage", "outcome"})

// Collector exports aivedio_stage_work_duration_seconds{stage,outcome} for
// every Function of this process. Register it once per registry; in-process
// readers (the journey benchmark) gather it through a registry of their own.
func Collector() prometheus.Collector { return workSeconds }

// workTimers are one stage's series, looked up once at New so that timing
// an event costs a clock read and an atomic add.
type workTimers struct {
	ok, permanent, retryable prometheus.Observer
}

func newWorkTimers(stage string) workTimers {
	return workTimers{
		ok:        workSeconds.WithLabelValues(stage, OutcomeOK),
		permanent: workSeconds.WithLabelValues(stage, OutcomePermanent),
		retryable: workSeconds.WithLabelValues(stage, OutcomeRetryable),
	}
}

func since(o prometheus.Observer, start time.Time) {
	o.Observe(time.Since(start).Seconds())
}
