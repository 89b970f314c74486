package slots

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/servicetest"
)

// backend is one Redis the conformance suite runs against. Every test runs
// once per backend, as a subtest named after it.
type backend struct {
	name string
	// url returns the URL of a Redis for one test, or skips (fails under
	// `make test`) when there is none.
	url func(t *testing.T) string
}

// backends are the real Redis that `make test` starts and the in-process
// miniredis that `go run ./local` falls back to: both must pass the suite.
var backends = []backend{
	{name: "redis", url: func(t *testing.T) string { return servicetest.Env(t, "Redis", "REDIS_URL") }},
	{name: "miniredis", url: miniredisURL},
}

// miniredisURL starts a miniredis for one test and stops it in t.Cleanup.
//
// ClockTTL makes key TTLs run down with the wall clock, as in Redis; without
// it miniredis only expires keys on FastForward, so a PEXPIREAT key would
// live forever. TIME already answers the wall clock, so the scripts judge
// lease expiry by the same clock that expires the keys.
func miniredisURL(t *testing.T) string {
	t.Helper()
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	require.NoError(t, m.Start())
	t.Cleanup(m.Close)
	return "redis://" + m.Addr() + "/0"
}
