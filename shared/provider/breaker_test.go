package provider_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
)

// scripted answers Submit with err and counts the calls that reached it.
type scripted struct {
	provider.Client
	err   error
	calls int
}

func (s *scripted) Name() string { return "scripted" }

func (s *scripted) Submit(context.Context, provider.SubmitRequest) (provider.Job, error) {
	s.calls++
	if s.err != nil {
		return provider.Job{}, s.err
	}
	return provider.Job{ID: "job"}, nil
}

func TestBreakerOpensOnOutagesAndRecovers(t *testing.T) {
	t.Parallel()
	down := &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
	inner := &scripted{err: down}
	var changes []string
	c := provider.WithBreaker(inner, provider.BreakerSettings{Failures: 3, Open: 50 * time.Millisecond,
		OnStateChange: func(_, from, to string) { changes = append(changes, from+"->"+to) }})

	for range 3 {
		_, err := c.Submit(t.Context(), provider.SubmitRequest{})
		require.Equal(t, provider.ClassUnavailable, provider.ClassOf(err))
	}
	_, err := c.Submit(t.Context(), provider.SubmitRequest{})
	require.Equal(t, provider.ClassUnavailable, provider.ClassOf(err))
	require.Equal(t, 50*time.Millisecond, provider.RetryAfterOf(err), "a refused call says when to come back")
	require.ErrorContains(t, err, "circuit open")
	require.Equal(t, 3, inner.calls, "an open circuit does not reach the provider")

	time.Sleep(60 * time.Millisecond)
	inner.err = nil
	job, err := c.Submit(t.Context(), provider.SubmitRequest{})
	require.NoError(t, err)
	require.Equal(t, "job", job.ID)
	require.Equal(t, []string{"closed->open", "open->half-open", "half-open->closed"}, changes)
}

func TestBreakerIgnoresTheProviderWorkingAsDesigned(t *testing.T) {
	t.Parallel()
	for _, err := range []error{
		&provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests},
		&provider.Error{Class: provider.ClassRejected, StatusCode: http.StatusUnprocessableEntity},
	} {
		inner := &scripted{err: err}
		c := provider.WithBreaker(inner, provider.BreakerSettings{Failures: 2})
		for range 5 {
			_, got := c.Submit(t.Context(), provider.SubmitRequest{})
			require.Equal(t, provider.ClassOf(err), provider.ClassOf(got))
		}
		require.Equal(t, 5, inner.calls, "%v does not open the circuit", err)
	}
}
