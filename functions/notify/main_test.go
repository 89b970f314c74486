package notify_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines outlive the tests: every test
// opens a Redis client and a subscription.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
