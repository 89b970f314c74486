// Package capacity is the arithmetic of seed 7.13.1–7.13.4: the message
// rate tasks put on the broker, what a pool of consumers takes, how long a
// backlog needs to drain, and what the broker stores. `go run ./adapter
// capacity` prints it; the seed's worked numbers are its tests.
package capacity

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Class is one kind of task: how many arrive per second, and how many
// broker messages each one causes on average (its fan-out).
type Class struct {
	TaskRate float64 // tasks/s
	Fanout   float64 // messages/task
}

// MessageRate is λ_msg = Σ λ_task_i × fanout_i, in messages/s: the broker
// is planned by messages, not by requests.
func MessageRate(classes ...Class) (float64, error) {
	if len(classes) == 0 {
		return 0, errors.New("name at least one task class (a task rate and its fan-out)")
	}
	var rate float64
	for i, c := range classes {
		if c.TaskRate < 0 || c.Fanout < 0 || math.IsNaN(c.TaskRate) || math.IsNaN(c.Fanout) {
			return 0, fmt.Errorf("class %d: task rate and fan-out must not be negative", i+1)
		}
		rate += c.TaskRate * c.Fanout
	}
	return rate, nil
}

// Consumers is a pool of identical consumer instances and the load on it.
type Consumers struct {
	Concurrency int           // work in flight per instance
	ServiceTime time.Duration // mean time of one unit of work
	Utilization float64       // the share of the ideal rate an instance really reaches, (0, 1]
	Arrival     float64       // units/s arriving at peak
}

// ConsumerPlan is what a pool needs.
type ConsumerPlan struct {
	PerInstance float64 // μ_instance ≈ concurrency / service time × utilization, units/s
	Instances   int     // the fewest instances whose total is at least the arrival rate
}

// Plan is μ_instance and the instances the arrival rate needs, before any
// headroom for failures and bursts.
func (c Consumers) Plan() (ConsumerPlan, error) {
	switch {
	case c.Concurrency < 1:
		return ConsumerPlan{}, fmt.Errorf("concurrency must be at least 1, got %d", c.Concurrency)
	case c.ServiceTime <= 0:
		return ConsumerPlan{}, fmt.Errorf("service time must be positive, got %s", c.ServiceTime)
	case c.Utilization <= 0 || c.Utilization > 1 || math.IsNaN(c.Utilization):
		return ConsumerPlan{}, fmt.Errorf("utilization is a share in (0, 1], got %g", c.Utilization)
	case c.Arrival < 0 || math.IsNaN(c.Arrival):
		return ConsumerPlan{}, fmt.Errorf("arrival rate must not be negative, got %g", c.Arrival)
	}
	per := float64(c.Concurrency) / c.ServiceTime.Seconds() * c.Utilization
	// A tolerance so that 14 / 1.4 is 10 instances, not 11 by rounding.
	return ConsumerPlan{PerInstance: per, Instances: int(math.Ceil(c.Arrival/per - 1e-9))}, nil
}

// ErrNeverDrains: consumption does not exceed arrival, so a backlog only
// grows.
var ErrNeverDrains = errors.New("the backlog never drains")

// DrainTime is T_drain = backlog / (consume − arrival): what counts is the
// net rate at which the backlog shrinks, not the consumers' rate alone.
func DrainTime(backlog, consume, arrival float64) (time.Duration, error) {
	if backlog < 0 || consume < 0 || arrival < 0 || math.IsNaN(backlog+consume+arrival) {
		return 0, errors.New("backlog and rates must not be negative")
	}
	if consume <= arrival {
		return 0, fmt.Errorf("%w: consumption (%g msg/s) does not exceed arrival (%g msg/s); add consumers or shed load until it does",
			ErrNeverDrains, consume, arrival)
	}
	return time.Duration(backlog / (consume - arrival) * float64(time.Second)), nil
}

// Storage is what the broker keeps.
type Storage struct {
	Rate         float64       // mean messages/s
	MessageBytes float64       // mean message size
	Retention    time.Duration // how long messages are kept
	Replicas     float64       // copies stored
	Overhead     float64       // index, file and safety margin factor (CommitLog, ConsumeQueue, retry topics, DLQ, disk watermark)
}

// Bytes are the logical bytes (message bodies over the retention) and the
// physical bytes (× replicas × overhead).
func (s Storage) Bytes() (logical, physical float64, err error) {
	switch {
	case s.Rate < 0 || s.MessageBytes < 0 || s.Retention < 0:
		return 0, 0, errors.New("rate, message size and retention must not be negative")
	case s.Replicas < 1:
		return 0, 0, fmt.Errorf("replicas must be at least 1, got %g", s.Replicas)
	case s.Overhead < 1:
		return 0, 0, fmt.Errorf("overhead is a factor of at least 1, got %g", s.Overhead)
	}
	logical = s.Rate * s.MessageBytes * s.Retention.Seconds()
	return logical, logical * s.Replicas * s.Overhead, nil
}

// GiB is 2^30 bytes.
const GiB = 1 << 30
