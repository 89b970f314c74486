package source_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/source"
)

func TestExponentialDelay(t *testing.T) {
	t.Parallel()
	delay := source.ExponentialDelay(10*time.Second, time.Minute)
	require.Equal(t, 10*time.Second, delay(1))
	require.Equal(t, 20*time.Second, delay(2))
	require.Equal(t, 40*time.Second, delay(3))
	require.Equal(t, time.Minute, delay(4))
	require.Equal(t, time.Minute, delay(400))
}
