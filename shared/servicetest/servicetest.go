// Package servicetest lets integration tests find the real services that
// `make services-up` starts, and decides what a missing service means.
//
// Under `make test` (which sets AIVEDIO_REQUIRE_SERVICES=1) and under CI=true a
// missing service fails the test: an integration test never skips there. In a
// plain `go test` on a laptop without services it skips, naming the command
// that starts them.
package servicetest

import (
	"os"
	"testing"
)

// Required reports whether a missing service must fail the test run.
func Required() bool {
	return os.Getenv("AIVEDIO_REQUIRE_SERVICES") == "1" || os.Getenv("CI") == "true"
}

// Env returns the value of the environment variable that locates a service
// (DATABASE_URL, REDIS_URL, ROCKETMQ_ENDPOINT, S3_ENDPOINT, ...). When it is
// unset the test fails under `make test` and CI, and skips elsewhere.
func Env(tb testing.TB, service, variable string) string {
	tb.Helper()
	if v := os.Getenv(variable); v != "" {
		return v
	}
	if Required() {
		tb.Fatalf("%s is required but %s is not set: run the tests with `make test`, or `make services-up` and `eval $(make -s services-env)`", service, variable)
	}
	tb.Skipf("%s not available (%s unset); `make test` starts it", service, variable)
	return ""
}
