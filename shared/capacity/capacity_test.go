package capacity_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/capacity"
)

// The worked numbers of seed 7.13.1–7.13.4.
func TestSeedNumbers(t *testing.T) {
	t.Parallel()
	rate, err := capacity.MessageRate(capacity.Class{TaskRate: 30, Fanout: 20})
	require.NoError(t, err)
	require.InDelta(t, 600, rate, 1e-9)

	plan, err := capacity.Consumers{Concurrency: 40, ServiceTime: 20 * time.Second, Utilization: 0.7, Arrival: 14}.Plan()
	require.NoError(t, err)
	require.InDelta(t, 1.4, plan.PerInstance, 1e-9)
	require.Equal(t, 10, plan.Instances)

	drain, err := capacity.DrainTime(1_000_000, 900, 600)
	require.NoError(t, err)
	require.InDelta(t, 3333.33, drain.Seconds(), 0.01)
	require.InDelta(t, 55.6, drain.Minutes(), 0.05)

	logical, physical, err := capacity.Storage{Rate: 160, MessageBytes: 2048, Retention: 72 * time.Hour, Replicas: 3, Overhead: 1.3}.Bytes()
	require.NoError(t, err)
	require.InDelta(t, 79, logical/capacity.GiB, 0.5)
	require.InDelta(t, 308, physical/capacity.GiB, 1)
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	_, err := capacity.DrainTime(1000, 600, 600)
	require.True(t, errors.Is(err, capacity.ErrNeverDrains))
	require.Contains(t, err.Error(), "does not exceed arrival")
	_, err = capacity.MessageRate()
	require.Error(t, err)
	_, err = capacity.Consumers{Concurrency: 4, ServiceTime: time.Second, Utilization: 1.5, Arrival: 1}.Plan()
	require.ErrorContains(t, err, "utilization")
	_, _, err = capacity.Storage{Rate: 1, MessageBytes: 1, Retention: time.Hour, Replicas: 0, Overhead: 1}.Bytes()
	require.ErrorContains(t, err, "replicas")
	// Several task classes add up.
	rate, err := capacity.MessageRate(capacity.Class{TaskRate: 30, Fanout: 20}, capacity.Class{TaskRate: 2, Fanout: 9})
	require.NoError(t, err)
	require.InDelta(t, 618, rate, 1e-9)
}

// TestSaturate: with the seed's figures (concurrency 40, 20 s, 0.7: 1.4
// task/s per instance) on one instance, a stage visited once per request
// saturates at 1.4 requests/s and one visited twice at 0.7, so the second
// is named first; a stage no request reached never saturates.
func TestSaturate(t *testing.T) {
	t.Parallel()
	s, err := capacity.Saturate(0.5, 0.7, []capacity.StageLoad{
		{Stage: "once", Arrival: 0.5, ServiceTime: 20 * time.Second, Instances: 1, Workers: 40},
		{Stage: "idle", Arrival: 0, ServiceTime: 0, Instances: 1, Workers: 40},
		{Stage: "twice", Arrival: 1, ServiceTime: 20 * time.Second, Instances: 1, Workers: 40},
		{Stage: "wide", Arrival: 1, ServiceTime: 20 * time.Second, Instances: 10, Workers: 40},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"twice", "once", "wide", "idle"}, []string{s.Stages[0].Stage, s.Stages[1].Stage, s.Stages[2].Stage, s.Stages[3].Stage})
	require.InDelta(t, 0.7, s.Stages[0].SaturatesAt, 1e-9)
	require.InDelta(t, 1.4, s.Stages[0].Capacity, 1e-9)
	require.InDelta(t, 2.0, s.Stages[0].PerRequest, 1e-9)
	require.InDelta(t, 1.4, s.Stages[1].SaturatesAt, 1e-9)
	require.InDelta(t, 7.0, s.Stages[2].SaturatesAt, 1e-9)
	require.True(t, math.IsInf(s.Stages[3].SaturatesAt, 1))

	_, err = capacity.Saturate(0, 0.7, nil)
	require.ErrorIs(t, err, capacity.ErrNoRequests)
}
