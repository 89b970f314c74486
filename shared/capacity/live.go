package capacity

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// StageLoad is what was measured of one stage over a window.
type StageLoad struct {
	Stage       string
	Arrival     float64       // deliveries/s the stage handled
	ServiceTime time.Duration // mean time of one delivery
	Instances   int           // replicas that reported
	Workers     int           // deliveries in flight per replica (SOURCE_WORKERS)
}

// StageCapacity is a stage's ceiling and the request rate at which it is
// reached.
type StageCapacity struct {
	StageLoad
	Capacity   float64 // deliveries/s: instances × μ_instance (see [Consumers.Plan])
	PerRequest float64 // deliveries of the stage per request (generation or render)
	// SaturatesAt is the request rate at which the stage's arrival reaches
	// its capacity: Capacity / PerRequest. +Inf for a stage no request
	// reaches.
	SaturatesAt float64
}

// Saturation is every stage's ceiling under the measured request rate,
// the first to saturate first.
type Saturation struct {
	Requests float64 // requests/s measured (generations and renders)
	Stages   []StageCapacity
}

// ErrNoRequests: nothing arrived in the window, so no visit ratio can be
// measured.
var ErrNoRequests = errors.New("no requests arrived in the window: measure under load")

// Saturate computes each stage's capacity at utilization and the request
// rate at which it saturates, from the measured request rate and stage
// loads. A stage's deliveries per request is its arrival over the request
// rate (the seed's fan-out, per stage); it saturates when requests ×
// deliveries per request reach instances × workers / service time ×
// utilization.
func Saturate(requests float64, utilization float64, loads []StageLoad) (Saturation, error) {
	if requests <= 0 || math.IsNaN(requests) {
		return Saturation{}, ErrNoRequests
	}
	out := Saturation{Requests: requests}
	for _, l := range loads {
		c := StageCapacity{StageLoad: l, SaturatesAt: math.Inf(1)}
		if l.Arrival > 0 {
			if l.Instances < 1 {
				l.Instances = 1
			}
			plan, err := Consumers{Concurrency: l.Workers, ServiceTime: l.ServiceTime, Utilization: utilization}.Plan()
			if err != nil {
				return Saturation{}, fmt.Errorf("stage %s: %w", l.Stage, err)
			}
			c.Instances = l.Instances
			c.Capacity = plan.PerInstance * float64(l.Instances)
			c.PerRequest = l.Arrival / requests
			c.SaturatesAt = c.Capacity / c.PerRequest
		}
		out.Stages = append(out.Stages, c)
	}
	slices.SortStableFunc(out.Stages, func(a, b StageCapacity) int {
		switch {
		case a.SaturatesAt < b.SaturatesAt:
			return -1
		case a.SaturatesAt > b.SaturatesAt:
			return 1
		}
		return 0
	})
	return out, nil
}
