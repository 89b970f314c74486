package source

import "time"

// RetryDelayFunc says how long a message stays invisible before its next
// delivery, given the attempt that just failed (1 for the first delivery).
type RetryDelayFunc func(attempt int) time.Duration

// ExponentialDelay doubles from base with each attempt, up to limit.
func ExponentialDelay(base, limit time.Duration) RetryDelayFunc {
	return func(attempt int) time.Duration {
		d := base
		for i := 1; i < attempt && d < limit; i++ {
			d *= 2
		}
		return min(d, limit)
	}
}
