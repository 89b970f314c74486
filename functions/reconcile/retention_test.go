package reconcile_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
)

// TestScanMaintainsPartitions: the scan's tick is the partition
// maintenance. Right after the migration the history partitions are past
// the window and empty, so the first scan drops them; partitions ahead
// exist already, so it creates none; a longer window keeps the history.
func TestScanMaintainsPartitions(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	long := reconcile.NewScanner(reconcile.Params{Pool: b.pool, Journey: scanJourney, ReplayWindow: 60 * 24 * time.Hour, Timeout: 10 * time.Second})
	rep, err := long.Scan(t.Context())
	require.NoError(t, err)
	for _, tr := range rep.Retention.Tables {
		require.Empty(t, tr.Dropped, "%s: nothing is 60 days old", tr.Table)
	}

	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Len(t, rep.Retention.Tables, 2)
	for _, tr := range rep.Retention.Tables {
		require.Equal(t, []string{tr.Table + "_history"}, tr.Dropped, tr.Table)
		require.Empty(t, tr.Created, tr.Table)
		require.Empty(t, tr.Busy, tr.Table)
	}
}
