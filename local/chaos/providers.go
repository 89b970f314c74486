package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/local/reviewsim"
)

// The providers a run's model is routed to, in order of preference: a
// generation starts at Replicate and fails over to Runway when Replicate
// refuses every send outright (an outage window, a 503 storm).
const (
	replicateName = "replicate"
	runwayName    = "runway"
	runwayModel   = "gen4.5"
	simToken      = "chaos-token"
)

// providerRoutes is PROVIDER_ROUTES for the run's one model.
func providerRoutes() string {
	return model + "=" + replicateName + "," + runwayName + ":" + runwayModel
}

// simProvider is one provider's simulator behind a front that answers 503
// to every API call during its outage window. The output files are served
// directly: an outage of the API, not of its CDN.
type simProvider struct {
	name   string
	sim    *providersim.Server
	url    string       // the front
	outage atomic.Int64 // until then (Unix ns) every API call answers 503
	close  func()
}

// outageUntil starts or extends the outage window; false when one already
// lasts past until.
func (p *simProvider) outageUntil(until time.Time) bool {
	for {
		cur := p.outage.Load()
		if until.UnixNano() <= cur {
			return false
		}
		if p.outage.CompareAndSwap(cur, until.UnixNano()) {
			return true
		}
	}
}

// simOptions are the simulators' faults: throttling, transient refusals,
// dropped answers, failed jobs, outputs not ready yet, and the odd content
// refusal (at create, or as a failed job), which must end a task FAILED
// content_rejected with its credits released, and never fail over.
func simOptions(seed int64, n int) providersim.Options {
	opts := providersim.DefaultOptions()
	opts.Seed = seed
	opts.Rate429, opts.Rate5xx, opts.RateDrop, opts.RateFail = 0.05, 0.03, 0.03, 0.05
	opts.RateContentRejectSubmit, opts.RateContentFail = 0.01, 0.01
	opts.OutputNotReady = time.Second
	opts.JobDurationMin, opts.JobDurationMax = 2*time.Second, 6*time.Second
	opts.MaxJobs = 10 * max(n, 100)
	opts.ThrottleAbove = 8 // Runway only: above it a task starts THROTTLED
	opts.APIToken = simToken
	return opts
}

// startProviders runs a simulator for each provider.
func (w *world) startProviders(ctx context.Context) error {
	for i, name := range []string{replicateName, runwayName} {
		p, err := startSimProvider(ctx, name, simOptions(w.o.Seed+int64(i), w.o.N))
		if err != nil {
			return err
		}
		w.closed = append(w.closed, p.close)
		w.providers = append(w.providers, p)
	}
	return nil
}

func startSimProvider(ctx context.Context, name string, opts providersim.Options) (p *simProvider, err error) {
	sim, err := providersim.New(opts, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = sim.Close()
		}
	}()
	direct, err := sim.Start(ctx, "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	target, err := url.Parse(direct)
	if err != nil {
		return nil, err
	}
	p = &simProvider{name: name, sim: sim}
	proxy := httputil.NewSingleHostReverseProxy(target)
	// The simulator's dropped answers must reach the client as what they
	// are, a connection closed without an answer (accepted or not is
	// unknown), not as the 502 a proxy would make of them.
	proxy.ErrorHandler = func(rw http.ResponseWriter, _ *http.Request, _ error) {
		if conn, _, err := http.NewResponseController(rw).Hijack(); err == nil {
			_ = conn.Close()
			return
		}
		rw.WriteHeader(http.StatusBadGateway)
	}
	front := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if time.Now().UnixNano() < p.outage.Load() && strings.HasPrefix(r.URL.Path, "/v1/") {
			rw.Header().Set("Content-Type", "application/json")
			rw.WriteHeader(http.StatusServiceUnavailable)
			_, _ = rw.Write([]byte(`{"detail":"chaos: provider outage window"}`))
			return
		}
		proxy.ServeHTTP(rw, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: front, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	p.url = "http://" + ln.Addr().String()
	p.close = func() { _ = srv.Close(); _ = sim.Close() }
	return p, nil
}

// provider is the simulator of name.
func (w *world) provider(name string) *simProvider {
	for _, p := range w.providers {
		if p.name == name {
			return p
		}
	}
	panic("chaos: no provider " + name)
}

// providerEnv configures both providers and the routes between them.
// Callbacks go to the API under each provider's own path; Runway sends
// none, so it is polled.
func (w *world) providerEnv() []string {
	rp, rw := w.provider(replicateName), w.provider(runwayName)
	return []string{
		"PROVIDER_NAME=" + replicateName, "PROVIDER_BASE_URL=" + rp.url, "PROVIDER_API_TOKEN=" + simToken,
		"PROVIDER_WEBHOOK_SECRET=" + rp.sim.WebhookSecret(),
		"PROVIDER_RUNWAY_BASE_URL=" + rw.url, "PROVIDER_RUNWAY_API_TOKEN=" + simToken,
		"PROVIDER_ROUTES=" + providerRoutes(),
		// The simulators serve their outputs over http on loopback.
		"FETCH_ALLOW_PRIVATE_OUTPUTS=true",
	}
}

// The reviewer's faults: transient refusals, rate limits and answers that
// are no decision, all waited on; a few rejections, which fail the task
// charged. Outage windows (the reviewer refusing every connection) are a
// fault kind of their own.
func reviewOptions(seed int64) reviewsim.Options {
	o := reviewsim.DefaultOptions()
	o.Seed = seed
	o.Secret = "chaos-review-secret"
	o.RejectRate, o.Rate5xx, o.Rate429, o.RateMalformed = 0.03, 0.05, 0.03, 0.02
	o.RetryAfter = time.Second
	return o
}

// reviewMaxWait is REVIEW_MAX_WAIT: far longer than any reviewer outage
// the run injects, so a task handed to a person as review.unavailable is
// a defect, not an effect of the faults.
const reviewMaxWait = 10 * time.Minute

// startReviewer runs the reviewer simulator the probe and review stages
// call.
func (w *world) startReviewer(ctx context.Context) error {
	sim, err := reviewsim.New(reviewOptions(w.o.Seed), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	w.closed = append(w.closed, func() { _ = sim.Close() })
	if w.reviewURL, err = sim.Start(ctx, "127.0.0.1:0"); err != nil {
		return err
	}
	w.reviewer = sim
	return nil
}

// reviewEnv turns the content review on.
func (w *world) reviewEnv() []string {
	return []string{"REVIEW_URL=" + w.reviewURL, "REVIEW_SECRET=" + w.reviewer.Secret(), "REVIEW_TIMEOUT=5s",
		"REVIEW_MAX_WAIT=" + reviewMaxWait.String(), "REVIEW_RETRY_BASE=1s", "REVIEW_RETRY_MAX=5s"}
}

// reviewerDown refuses every review call until until (a goroutine brings
// the reviewer back); false when an outage is already under way.
func (w *world) reviewerDown(ctx context.Context, until time.Time) bool {
	if !w.reviewOutage.CompareAndSwap(false, true) {
		return false
	}
	w.reviewer.SetDown(true)
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(until)):
		}
		w.reviewer.SetDown(false)
		w.reviewOutage.Store(false)
	}()
	return true
}

// simFaults is one provider's fault counts, for the report.
func simFaults(p *simProvider) string {
	f := p.sim.Stats().Faults
	return fmt.Sprintf("%s: %d 429s, %d 503s, %d dropped answers, %d failed jobs, %d outputs not ready, %d refused and %d failed for content, %d throttled",
		p.name, f.RateLimited, f.ServerErrors, f.Dropped, f.FailedJobs, f.OutputNotReady, f.ContentRejectedAtSubmit, f.ContentFailedJobs, f.Throttled)
}
