package capacity_test

import (
	"errors"
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
