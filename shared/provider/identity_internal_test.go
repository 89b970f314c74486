package provider

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// TestCheckIdentityCountsMismatches: a job that echoes another attempt's
// client request id is refused and counted by provider and where; one
// that echoes ours, or none, passes uncounted. Not parallel: the counter
// is process-wide.
func TestCheckIdentityCountsMismatches(t *testing.T) {
	counted := func() float64 {
		return testutil.ToFloat64(identityMismatches.WithLabelValues("replicate", CheckedAtCallback))
	}
	before := counted()
	require.NoError(t, CheckIdentity("replicate", CheckedAtCallback, Job{ID: "j1", ClientRequestID: "ours"}, "ours"))
	require.NoError(t, CheckIdentity("replicate", CheckedAtCallback, Job{ID: "j1"}, "ours"))
	require.Equal(t, before, counted())
	err := CheckIdentity("replicate", CheckedAtCallback, Job{ID: "j1", ClientRequestID: "theirs"}, "ours")
	require.ErrorContains(t, err, "carries client request id theirs, not ours")
	require.Equal(t, before+1, counted())
}
