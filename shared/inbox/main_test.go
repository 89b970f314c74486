package inbox_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines outlive the tests: the concurrency
// tests start their own, and every test opens a connection pool.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
