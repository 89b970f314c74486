package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEveryCommandAnswersHelp: every command and subcommand answers -h,
// -help, --help (and "help") with its usage and no error (exit status 0),
// without starting anything.
func TestEveryCommandAnswersHelp(t *testing.T) {
	t.Parallel()
	commands := map[string]string{
		"":                  "usage: adapter <command>",
		"migrate":           "adapter migrate up|down",
		"migrate up":        "adapter migrate up|down",
		"topics":            "adapter topics apply",
		"topics apply":      "adapter topics apply",
		"topics list":       "adapter topics list",
		"topics grant":      "usage: adapter topics grant --user U",
		"relay":             "adapter relay",
		"source":            "adapter source --group G",
		"dlq":               "adapter dlq drain --group G",
		"dlq drain":         "adapter dlq drain --group G",
		"tenants":           "usage: adapter tenants create",
		"tenants create":    "usage: adapter tenants create",
		"quarantine":        "usage: adapter quarantine list",
		"quarantine list":   "usage: adapter quarantine list",
		"quarantine show":   "adapter quarantine show",
		"replay":            "adapter replay --event ID",
		"replay --event x":  "adapter replay --event ID",
		"source --group cg": "adapter source --group G",
	}
	for cmd, want := range commands {
		for _, flag := range []string{"-h", "-help", "--help"} {
			var out bytes.Buffer
			args := append(strings.Fields(cmd), flag)
			require.True(t, answerHelp(args, &out), "%v", args)
			require.Contains(t, out.String(), want, "%v", args)
		}
		var out bytes.Buffer
		require.True(t, answerHelp(append([]string{"help"}, strings.Fields(cmd)...), &out), "help %s", cmd)
		require.Contains(t, out.String(), want, "help %s", cmd)
	}
	// Through run: nothing is started, nothing fails.
	for _, args := range [][]string{{"relay", "--help"}, {"source", "--group", "cg.asset.fetch.v1", "-h"}, {"quarantine", "--help"}} {
		require.NoError(t, run(t.Context(), args), "%v", args)
	}
	require.False(t, answerHelp([]string{"quarantine", "list"}, &bytes.Buffer{}), "no help asked")
	require.ErrorContains(t, run(t.Context(), []string{"nonsense", "--help"}), `unknown command "nonsense"`)
}
