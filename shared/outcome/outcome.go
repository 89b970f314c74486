// Package outcome classifies a handler's failure in the one place the whole
// pipeline reads it (docs/design.md §6):
//
//   - [Permanent]: retrying cannot help (invalid envelope, unsupported schema,
//     tenant mismatch, a 4xx). The adapter quarantines the message and ACKs.
//   - [Retryable]: it may work later (a 5xx, a timeout, a refused
//     connection). The adapter hands the message back to the broker with
//     backoff, up to the group's maximum delivery attempts.
//
// An error with neither mark counts as retryable: losing a message to a
// misclassified error is worse than retrying it until the dead-letter topic.
// Business waits (provider 429, poll not due, no slot) are not failures at
// all: handlers record them and return nil.
package outcome

import (
	"errors"
	"fmt"
	"time"
)

// Class is how a failure should be handled.
type Class string

// The classes.
const (
	ClassPermanent Class = "permanent"
	ClassRetryable Class = "retryable"
)

// Error carries a failure and its class.
type Error struct {
	Class Class
	// Code is a short machine-readable reason, e.g. "envelope.bad_id".
	Code string
	Err  error
	// RetryAfter, when set on a retryable failure, is when the work can
	// next make progress (a claim another delivery holds runs out then):
	// the adapter redelivers after it instead of its own backoff.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Permanent marks err as not worth retrying, with a short reason code.
func Permanent(code string, err error) error {
	if err == nil {
		err = errors.New(code)
	}
	return &Error{Class: ClassPermanent, Code: code, Err: err}
}

// Retryable marks err as worth retrying, with a short reason code.
func Retryable(code string, err error) error {
	if err == nil {
		err = errors.New(code)
	}
	return &Error{Class: ClassRetryable, Code: code, Err: err}
}

// RetryAfter marks err as worth retrying after d, and not before: the
// adapter hands the message back for d rather than for its backoff.
func RetryAfter(code string, err error, d time.Duration) error {
	if err == nil {
		err = errors.New(code)
	}
	return &Error{Class: ClassRetryable, Code: code, Err: err, RetryAfter: d}
}

// RetryAfterOf is the wait a retryable err asks for; false: none, the
// adapter's backoff decides.
func RetryAfterOf(err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.Class == ClassRetryable && e.RetryAfter > 0 {
		return e.RetryAfter, true
	}
	return 0, false
}

// Permanentf is Permanent with a formatted message.
func Permanentf(code, format string, args ...any) error {
	return Permanent(code, fmt.Errorf(format, args...))
}

// Of returns the class and code of err; unmarked errors are retryable with
// code "unclassified".
func Of(err error) (Class, string) {
	var e *Error
	if errors.As(err, &e) {
		return e.Class, e.Code
	}
	return ClassRetryable, "unclassified"
}

// IsPermanent reports whether err is marked permanent.
func IsPermanent(err error) bool {
	class, _ := Of(err)
	return err != nil && class == ClassPermanent
}
