package provider_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/provider"
)

type named struct {
	provider.Client
	name string
}

func (n named) Name() string { return n.name }

type unfit struct{ named }

func (unfit) Supports(provider.SubmitRequest) error { return errors.New("no 4K") }

func TestParseRoutes(t *testing.T) {
	t.Parallel()
	got, err := provider.ParseRoutes(" luma/ray-2-720p = replicate, runway:gen4.5 ; minimax/video-01=replicate;")
	require.NoError(t, err)
	require.Equal(t, provider.Routes{
		"luma/ray-2-720p":  {{Provider: "replicate", Model: "luma/ray-2-720p"}, {Provider: "runway", Model: "gen4.5"}},
		"minimax/video-01": {{Provider: "replicate", Model: "minimax/video-01"}},
	}, got)

	for spec, want := range map[string]string{
		"m":                         "want model=provider",
		"m=":                        `provider "" is not`,
		"m=a,a":                     `lists provider "a" twice`,
		"m=a;m=b":                   "routed twice",
		"m=a:b:c":                   "is not provider[:provider-model]",
		"m=a b":                     "is not provider[:provider-model]",
		"=a":                        "want model=provider",
		"m=replicate,runway:;n=x,y": "", // an empty provider model is the model's own name
	} {
		_, err := provider.ParseRoutes(spec)
		if want == "" {
			require.NoError(t, err, spec)
			continue
		}
		require.ErrorContains(t, err, want, spec)
	}
}

func TestNewSetRefusesWhatWouldStrandATask(t *testing.T) {
	t.Parallel()
	a, b := named{name: "a"}, named{name: "b"}
	_, err := provider.NewSet([]provider.Client{a}, provider.Routes{"m": {{Provider: "b", Model: "m"}}}, nil)
	require.ErrorContains(t, err, `names provider "b", which is not configured (configured: a)`)
	_, err = provider.NewSet([]provider.Client{a, b}, provider.Routes{"m": {{Provider: "b", Model: "m"}}}, []string{"m", "n"})
	require.ErrorContains(t, err, `model "n" (API_MODELS) has no provider`)
	_, err = provider.NewSet([]provider.Client{a, a}, nil, nil)
	require.ErrorContains(t, err, "configured twice")

	s, err := provider.NewSet([]provider.Client{a, b}, nil, []string{"m"})
	require.NoError(t, err)
	require.Equal(t, []provider.Route{{Provider: "a", Model: "m"}}, s.Routes("m"), "no routes: every model to the first provider")
	_, err = s.Client("c")
	require.ErrorContains(t, err, `provider "c" is not configured`)
}

func TestCandidatesPreferClosedCircuitsAndSkipTheUnfit(t *testing.T) {
	t.Parallel()
	down := &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
	broken := provider.WithBreaker(&scripted{err: down}, provider.BreakerSettings{Failures: 1, Open: time.Minute})
	_, _ = broken.Submit(t.Context(), provider.SubmitRequest{}) // opens it
	require.Equal(t, "open", provider.BreakerState(broken))
	s, err := provider.NewSet([]provider.Client{broken, named{name: "b"}, unfit{named{name: "c"}}},
		provider.Routes{"m": {{Provider: "scripted", Model: "m1"}, {Provider: "c", Model: "m3"}, {Provider: "b", Model: "m2"}}}, []string{"m"})
	require.NoError(t, err)
	cands, why := s.Candidates("m", provider.SubmitRequest{Resolution: "3840x2160"})
	require.Len(t, cands, 2)
	require.Equal(t, "b", cands[0].Provider, "the closed circuit first")
	require.Equal(t, "m2", cands[0].Model)
	require.Equal(t, "scripted", cands[1].Provider)
	require.Equal(t, "open", cands[1].Breaker)
	require.Equal(t, []string{"c: no 4K"}, why)
}

func TestRefusedOutright(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&provider.Error{Class: provider.ClassRateLimited, StatusCode: 429}, true},
		{&provider.Error{Class: provider.ClassUnavailable, StatusCode: 503}, true},
		{&provider.Error{Class: provider.ClassUnavailable, StatusCode: 408}, true},
		{&provider.Error{Class: provider.ClassUnavailable}, true}, // never sent
		{&provider.Error{Class: provider.ClassUnavailable, StatusCode: 503, Code: "circuit_open"}, true},
		{&provider.Error{Class: provider.ClassUnavailable, StatusCode: 500}, false},
		{&provider.Error{Class: provider.ClassUnavailable, StatusCode: 502}, false},
		{&provider.Error{Class: provider.ClassUnavailable, StatusCode: 504}, false},
		{&provider.Error{Class: provider.ClassTimeoutUnknown}, false},
		{&provider.Error{Class: provider.ClassMalformed}, false},
		{&provider.Error{Class: provider.ClassContentRejected, StatusCode: 400}, true},
		{errors.New("unclassified"), false},
	} {
		require.Equal(t, c.want, provider.RefusedOutright(c.err), "%v", c.err)
	}
}

func TestWithoutRoutesEveryModelGoesToTheFirstProvider(t *testing.T) {
	t.Parallel()
	s, err := provider.NewSet([]provider.Client{named{name: "a"}, named{name: "b"}}, nil, nil)
	require.NoError(t, err)
	require.Equal(t, []provider.Route{{Provider: "a", Model: "any/model"}}, s.Routes("any/model"))
}

func TestTheBreakerLetsTheRouterAskTheClient(t *testing.T) {
	t.Parallel()
	wrapped := provider.WithBreaker(unfit{named{name: "c"}}, provider.BreakerSettings{})
	s, err := provider.NewSet([]provider.Client{wrapped}, provider.Routes{"m": {{Provider: "c", Model: "m"}}}, nil)
	require.NoError(t, err)
	cands, why := s.Candidates("m", provider.SubmitRequest{})
	require.Empty(t, cands)
	require.Equal(t, []string{"c: no 4K"}, why)
}

// blocking answers Submit once release is closed.
type blocking struct {
	named
	entered, release chan struct{}
}

func (b blocking) Submit(context.Context, provider.SubmitRequest) (provider.Job, error) {
	close(b.entered)
	<-b.release
	return provider.Job{ID: "job"}, nil
}

// TestAHalfOpenCircuitKeepsItsPlace: a half-open circuit stays first in
// route order, so the preferred provider gets its trial call; once a
// submit claims that call, and while it is under way, the circuit reads
// open (every other call would be refused) and goes last; its success
// closes it.
func TestAHalfOpenCircuitKeepsItsPlace(t *testing.T) {
	t.Parallel()
	first := blocking{named: named{name: "a"}, entered: make(chan struct{}), release: make(chan struct{})}
	breaker := provider.WithBreaker(&failOnce{blocking: first}, provider.BreakerSettings{Failures: 1, Open: 20 * time.Millisecond})
	s, err := provider.NewSet([]provider.Client{breaker, named{name: "b"}},
		provider.Routes{"m": {{Provider: "a", Model: "m"}, {Provider: "b", Model: "m"}}}, []string{"m"})
	require.NoError(t, err)
	_, _ = breaker.Submit(t.Context(), provider.SubmitRequest{}) // opens it
	order := func() []string {
		cands, _ := s.Candidates("m", provider.SubmitRequest{})
		var out []string
		for _, c := range cands {
			out = append(out, c.Provider+":"+c.Breaker)
		}
		return out
	}
	require.Equal(t, []string{"b:closed", "a:open"}, order())
	require.Eventually(t, func() bool { return provider.BreakerState(breaker) == "half-open" }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, []string{"a:half-open", "b:closed"}, order(), "the preferred provider gets its trial")

	release, ok := provider.ClaimTrial(breaker)
	require.True(t, ok, "the first submit routed there claims the trial")
	_, ok = provider.ClaimTrial(breaker)
	require.False(t, ok, "a second does not")
	require.Equal(t, []string{"b:closed", "a:open"}, order(), "the others go elsewhere meanwhile")
	release()
	require.Equal(t, []string{"a:half-open", "b:closed"}, order(), "a claim given back")
	release, ok = provider.ClaimTrial(breaker)
	require.True(t, ok)
	defer release()

	done := make(chan error, 1)
	go func() { _, err := breaker.Submit(context.Background(), provider.SubmitRequest{}); done <- err }()
	<-first.entered
	require.Equal(t, []string{"b:closed", "a:open"}, order(), "its one trial call is under way")
	close(first.release)
	require.NoError(t, <-done)
	require.Equal(t, []string{"a:closed", "b:closed"}, order())
}

// failOnce fails its first Submit as an outage, then is its blocking
// client.
type failOnce struct {
	blocking
	failed bool
}

func (f *failOnce) Submit(ctx context.Context, req provider.SubmitRequest) (provider.Job, error) {
	if !f.failed {
		f.failed = true
		return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusServiceUnavailable}
	}
	return f.blocking.Submit(ctx, req)
}
