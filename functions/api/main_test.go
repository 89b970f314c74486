package api_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines outlive the tests: the server's
// event listener, its streams and the test HTTP servers all start their own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
