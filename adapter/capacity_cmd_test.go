package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCapacityReproducesTheSeed: the firm flags print the seed's worked
// numbers, as text and as JSON, and a backlog that cannot drain is
// refused with the reason.
func TestCapacityReproducesTheSeed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		text []string
		json map[string]float64
	}{
		{[]string{"rate", "--task-rate", "30", "--fanout", "20"}, []string{"600 msg/s"}, map[string]float64{"message_rate": 600}},
		{[]string{"consumers", "--concurrency", "40", "--service-time", "20s", "--utilization", "0.7", "--arrival", "14"},
			[]string{"1.4 task/s", "instances needed: 10"}, map[string]float64{"per_instance": 1.4, "instances": 10}},
		{[]string{"drain", "--backlog", "1000000", "--consume", "900", "--arrival", "600"},
			[]string{"3,333.3 s", "55.6 min"}, map[string]float64{"drain_seconds": 3333.3}},
		{[]string{"storage", "--rate", "160", "--message-bytes", "2048", "--retention", "72h", "--replicas", "3", "--overhead", "1.3"},
			[]string{"logical: 79.1 GiB", "physical: 308.5 GiB"}, map[string]float64{"logical_bytes": 84934656000, "physical_bytes": 331245158400}},
	} {
		var out bytes.Buffer
		require.NoError(t, runCapacity(c.args, &out), c.args)
		for _, want := range c.text {
			require.Contains(t, out.String(), want, c.args)
		}
		out.Reset()
		require.NoError(t, runCapacity(append(c.args, "--json"), &out))
		var got map[string]float64
		require.NoError(t, json.Unmarshal(out.Bytes(), &got))
		for k, v := range c.json {
			require.InDelta(t, v, got[k], 0.1, "%v %s", c.args, k)
		}
	}
	err := runCapacity([]string{"drain", "--backlog", "10", "--consume", "500", "--arrival", "600"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "never drains")
	err = runCapacity([]string{"rate", "--task-rate", "30,2", "--fanout", "20"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "one fan-out per task rate")
	err = runCapacity([]string{"guess"}, &bytes.Buffer{})
	require.ErrorContains(t, err, "unknown capacity subcommand")
	var help bytes.Buffer
	require.True(t, answerHelp([]string{"capacity", "--help"}, &help))
	require.True(t, strings.HasPrefix(help.String(), "usage: adapter capacity"))
}
