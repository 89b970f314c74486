package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/shared/outcome"
)

// MaxAttempts bounds how often [Do] and [DoBatch] run a transaction that
// fails with a serialization failure or a deadlock: the first try and three
// retries. Conflicts that outlast them are left to the broker's redelivery.
const MaxAttempts = 4

// newBackOff spaces the retries: a conflict between short transactions
// clears within milliseconds, and the message's own deadline is seconds away.
func newBackOff() backoff.BackOff {
	return &backoff.ExponentialBackOff{
		InitialInterval:     10 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         200 * time.Millisecond,
	}
}

// retry runs attempt until it succeeds, fails with an error that is not a
// conflict, or has run MaxAttempts times. A non-conflict error comes back
// unchanged; the last conflict comes back marked retryable.
func retry[T any](ctx context.Context, attempt func() (T, error)) (T, error) {
	v, err := backoff.Retry(ctx, func() (T, error) {
		v, err := attempt()
		if err != nil {
			if _, ok := conflict(err); !ok {
				return v, backoff.Permanent(err)
			}
		}
		return v, err
	}, backoff.WithBackOff(newBackOff()), backoff.WithMaxTries(MaxAttempts))
	if err == nil {
		return v, nil
	}
	var zero T
	// Retry unwraps a permanent error, except on the last try; only the
	// outermost wrapper is ours.
	if p, ok := err.(*backoff.PermanentError); ok {
		return zero, p.Err
	}
	if code, ok := conflict(err); ok {
		return zero, outcome.Retryable(code, fmt.Errorf("inbox transaction failed %d times: %w", MaxAttempts, err))
	}
	return zero, err // the context ended between tries
}

// conflict reports whether err is a serialization failure or a deadlock that
// nobody marked permanent, with the outcome code for it.
func conflict(err error) (code string, ok bool) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || outcome.IsPermanent(err) {
		return "", false
	}
	switch pgErr.Code {
	case pgerrcode.SerializationFailure:
		return "inbox.serialization_failure", true
	case pgerrcode.DeadlockDetected:
		return "inbox.deadlock", true
	}
	return "", false
}
