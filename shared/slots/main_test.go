package slots

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines outlive the tests: the race test
// starts its own and every test opens a Redis connection pool.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
