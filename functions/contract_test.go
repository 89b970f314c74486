package functions_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions"
)

// contractTest is a TestStageContract that runs the stage-contract suite.
var contractTest = regexp.MustCompile(`(?s)func TestStageContract\(t \*testing\.T\) \{.*?stagecontract\.Run\(`)

// TestEveryStageKeepsTheContract: a stage cannot be registered without a
// TestStageContract in its package running the stage-contract suite
// (functions/stage/stagecontract) over HTTP and in process.
func TestEveryStageKeepsTheContract(t *testing.T) {
	t.Parallel()
	built := functions.Built()
	require.NotEmpty(t, built)
	for _, name := range built {
		files, err := filepath.Glob(filepath.Join(name, "*_test.go"))
		require.NoError(t, err)
		found := false
		for _, f := range files {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			found = found || contractTest.Match(src)
		}
		require.True(t, found, "stage %s is registered but functions/%s has no TestStageContract running stagecontract.Run", name, name)
	}
}
