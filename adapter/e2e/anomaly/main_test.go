package anomaly_test

import (
	"testing"

	"go.uber.org/goleak"
)

// leakOptions are the goroutines TestMain tolerates. The RocketMQ client
// (imported by adapter/dlq) brings in OpenCensus, whose package init starts
// a worker that lives as long as the process; the real-broker tests add
// what the client itself leaves behind (realbroker_test.go).
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
}

// TestMain fails the run when goroutines outlive the tests: every relay,
// source adapter and drainer a test starts must have returned.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, leakOptions...)
}
