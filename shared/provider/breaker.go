package provider

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerSettings tune [WithBreaker].
type BreakerSettings struct {
	// Failures in a row that open the circuit; 5 when zero.
	Failures uint32
	// Open is how long the circuit stays open before one trial call; 30 s
	// when zero. It is also the Retry-After a refused call carries.
	Open time.Duration
	// OnStateChange, when set, hears "closed", "open", "half-open".
	OnStateChange func(provider, from, to string)
}

// WithBreaker guards c with a circuit breaker (sony/gobreaker): after
// Failures calls in a row that found the provider down (unavailable,
// answer lost, unreadable answers), every call fails at once with
// ClassUnavailable and a RetryAfter until the circuit half-opens, so a
// provider in trouble is not hammered. The submit stage turns that into
// WAITING_RETRY, a business wait. Rate limiting, rejections and missing
// jobs are the provider working as designed and do not count.
//
// Submit, Get, FindByClientRequestID and Cancel go through the breaker;
// Download and ParseCallback do not (a download failing is about one
// output, a callback is the provider calling us).
func WithBreaker(c Client, s BreakerSettings) Client {
	if s.Failures == 0 {
		s.Failures = 5
	}
	if s.Open <= 0 {
		s.Open = 30 * time.Second
	}
	st := gobreaker.Settings{
		Name:        c.Name(),
		MaxRequests: 1,
		Timeout:     s.Open,
		ReadyToTrip: func(counts gobreaker.Counts) bool { return counts.ConsecutiveFailures >= s.Failures },
		IsSuccessful: func(err error) bool {
			switch ClassOf(err) {
			case ClassUnavailable, ClassTimeoutUnknown, ClassMalformed:
				return false
			}
			return true
		},
	}
	if s.OnStateChange != nil {
		st.OnStateChange = func(name string, from, to gobreaker.State) { s.OnStateChange(name, from.String(), to.String()) }
	}
	return &breaker{Client: c, cb: gobreaker.NewCircuitBreaker[Job](st), open: s.Open}
}

type breaker struct {
	Client
	cb   *gobreaker.CircuitBreaker[Job]
	open time.Duration

	mu           sync.Mutex
	claimedUntil time.Time // a half-open circuit's trial is taken until then
}

func (b *breaker) call(fn func() (Job, error)) (Job, error) {
	job, err := b.cb.Execute(fn)
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return Job{}, &Error{Class: ClassUnavailable, StatusCode: http.StatusServiceUnavailable, RetryAfter: b.open,
			Code: "circuit_open", Message: "circuit open: " + b.Name() + " failed repeatedly, calls paused", Err: err}
	}
	return job, err
}

func (b *breaker) Submit(ctx context.Context, req SubmitRequest) (Job, error) {
	return b.call(func() (Job, error) { return b.Client.Submit(ctx, req) })
}

func (b *breaker) Get(ctx context.Context, jobID string) (Job, error) {
	return b.call(func() (Job, error) { return b.Client.Get(ctx, jobID) })
}

func (b *breaker) FindByClientRequestID(ctx context.Context, id string, since time.Time) (Job, error) {
	return b.call(func() (Job, error) { return b.Client.FindByClientRequestID(ctx, id, since) })
}

func (b *breaker) Cancel(ctx context.Context, jobID string) (Job, error) {
	return b.call(func() (Job, error) { return b.Client.Cancel(ctx, jobID) })
}

// State is the circuit's state now: "closed", "half-open" or "open". An
// open circuit whose pause has ended reads half-open until its one trial
// call is claimed ([ClaimTrial]) or starts, and open while that call is
// under way: every other call would be refused until it ends.
func (b *breaker) State() string {
	st := b.cb.State()
	if st == gobreaker.StateHalfOpen && b.trialTaken(time.Now()) {
		return gobreaker.StateOpen.String()
	}
	return st.String()
}

func (b *breaker) trialTaken(now time.Time) bool {
	b.mu.Lock()
	claimed := now.Before(b.claimedUntil)
	b.mu.Unlock()
	return claimed || b.cb.Counts().Requests > 0
}

func (b *breaker) claimTrial() (release func(), ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.cb.State() {
	case gobreaker.StateClosed:
		return func() {}, true
	case gobreaker.StateOpen:
		return nil, false
	}
	now := time.Now()
	if now.Before(b.claimedUntil) || b.cb.Counts().Requests > 0 {
		return nil, false
	}
	until := now.Add(b.open)
	b.claimedUntil = until
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.claimedUntil.Equal(until) {
			b.claimedUntil = time.Time{}
		}
	}, true
}

// ClaimTrial reserves a half-open circuit's one trial call for the caller
// about to make it, so that concurrent submits do not all route to the
// recovering provider and all but one be refused there: to the others the
// circuit reads open until the trial ends, or until the claim lapses after
// the breaker's pause. ok is true for a closed circuit or a client without
// a breaker (nothing to claim), false for an open one or a trial taken.
// release gives back a claim the caller will not use.
func ClaimTrial(c Client) (release func(), ok bool) {
	b, isBreaker := c.(*breaker)
	if !isBreaker {
		return func() {}, true
	}
	return b.claimTrial()
}

// BreakerPause is how long c's circuit stays open once it opens (the wait
// before its trial call); 0 for a client without a breaker.
func BreakerPause(c Client) time.Duration {
	if b, ok := c.(*breaker); ok {
		return b.open
	}
	return 0
}

// DedupsByIdempotencyKey is the wrapped client's: the breaker sends
// nothing of its own.
func (b *breaker) DedupsByIdempotencyKey() bool { return ResendSafe(b.Client) }

// Supports is the wrapped client's capability check ([Capable]); a client
// without one is taken to accept anything. The router sees through the
// breaker this way.
func (b *breaker) Supports(req SubmitRequest) error {
	if c, ok := b.Client.(Capable); ok {
		return c.Supports(req)
	}
	return nil
}
