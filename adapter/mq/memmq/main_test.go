package memmq_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when goroutines outlive the tests: the broker starts
// none, and the tests' own must all end.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
