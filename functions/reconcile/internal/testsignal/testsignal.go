// Package testsignal lets a test wait for something a service did instead
// of sleeping: the service signals at a point of interest, and the signal
// is a no-op unless a test initialised it.
package testsignal

import "time"

// WaitTimeout bounds how long Wait waits: a signal that does not come is a
// failed test, not a hung one.
const WaitTimeout = 10 * time.Second

// TB is the part of testing.TB a signal uses, so that production code
// holding signals need not import package testing.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal carries values of T from a service to a test.
type Signal[T any] struct {
	ch chan T
}

// Init arms the signal; only a test calls it. Up to 100 signals queue;
// past that they are dropped, so a test that stops reading never blocks
// the service it watches.
func (s *Signal[T]) Init() { s.ch = make(chan T, 100) }

// Signal records v for a waiting test; a no-op on a signal never armed.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// Wait returns the next signalled value, failing tb after WaitTimeout.
func (s *Signal[T]) Wait(tb TB) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatalf("testsignal: Wait on a signal that was never armed with Init")
	}
	select {
	case v := <-s.ch:
		return v
	case <-time.After(WaitTimeout):
		tb.Fatalf("testsignal: no signal within %s", WaitTimeout)
	}
	var zero T
	return zero
}
