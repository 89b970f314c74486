package config_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/config"
)

func TestHelpRequested(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"-help"}, {"x", "--help"}} {
		require.True(t, config.HelpRequested(args), "%v", args)
	}
	for _, args := range [][]string{nil, {"help-me"}, {"--helpful"}, {"-x"}} {
		require.False(t, config.HelpRequested(args), "%v", args)
	}
}

// TestPrintUsageListsTheEnvironment: a command configured by environment
// answers -h with every variable it reads, its default and its meaning.
func TestPrintUsageListsTheEnvironment(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	require.NoError(t, config.PrintUsage(&out, "usage: function", &config.StageFunction{}))
	for _, want := range []string{"usage: function", "DATABASE_URL", "FETCH_MAX_WAIT", "15m", "STAGE"} {
		require.Contains(t, out.String(), want)
	}
	require.NotContains(t, out.String(), "SOURCE_WORKERS", "the stage function reads no adapter settings")
}

// TestSourceDefaultsAreSaidOnce: the Source block's default tags are the
// exported defaults every other reader of those knobs takes for zero.
func TestSourceDefaultsAreSaidOnce(t *testing.T) {
	for _, v := range []string{"SOURCE_WORKERS", "SOURCE_INVISIBLE", "SOURCE_HANDLER_TIMEOUT"} {
		t.Setenv(v, "") // restored when the test ends
		require.NoError(t, os.Unsetenv(v))
	}
	var s config.Source
	require.NoError(t, config.Load(&s))
	require.Equal(t, config.DefaultSourceWorkers, s.Workers)
	require.Equal(t, config.DefaultSourceInvisible, s.Invisible)
	require.Equal(t, config.DefaultSourceHandlerTimeout, s.HandlerTimeout)
}

// TestReplayWindowDefaultIsSaidOnce: REPLAY_WINDOW's default tag is the
// exported default that retention and replay take for zero, and a window
// shorter than the broker keeps messages is refused by name.
func TestReplayWindowDefaultIsSaidOnce(t *testing.T) {
	t.Setenv("REPLAY_WINDOW", "") // restored when the test ends
	require.NoError(t, os.Unsetenv("REPLAY_WINDOW"))
	var r config.Retention
	require.NoError(t, config.Load(&r))
	require.Equal(t, config.DefaultReplayWindow, r.ReplayWindow)

	t.Setenv("REPLAY_WINDOW", "24h")
	require.ErrorContains(t, config.Load(&r), "REPLAY_WINDOW must be at least 72h0m0s")
}

// TestProgressMergeDefaultsAreSaidOnce: PROGRESS_MERGE_STEP's and
// PROGRESS_MERGE_INTERVAL's default tags are the exported defaults package
// progress takes for zero, and unusable values are refused by name.
func TestProgressMergeDefaultsAreSaidOnce(t *testing.T) {
	for _, v := range []string{"PROGRESS_MERGE_STEP", "PROGRESS_MERGE_INTERVAL"} {
		t.Setenv(v, "") // restored when the test ends
		require.NoError(t, os.Unsetenv(v))
	}
	var j config.Journey
	require.NoError(t, config.Load(&j))
	require.Equal(t, config.DefaultProgressStep, j.ProgressStep)
	require.Equal(t, config.DefaultProgressInterval, j.ProgressInterval)

	for v, want := range map[string]string{"0": "PROGRESS_MERGE_STEP must be from 1 to 100", "101": "PROGRESS_MERGE_STEP must be from 1 to 100"} {
		t.Setenv("PROGRESS_MERGE_STEP", v)
		require.ErrorContains(t, config.Load(&j), want)
	}
	t.Setenv("PROGRESS_MERGE_STEP", "5")
	t.Setenv("PROGRESS_MERGE_INTERVAL", "500ms")
	require.ErrorContains(t, config.Load(&j), "PROGRESS_MERGE_INTERVAL must be at least 1s")
	t.Setenv("PROGRESS_MERGE_INTERVAL", "2m")
	require.NoError(t, config.Load(&j))
	require.Equal(t, 5, j.ProgressStep)
}
