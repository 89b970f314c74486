package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/aivedio/pipeline/shared/outcome"
)

// DefaultColdStart is the cold-start budget of an [HTTP] that names none.
const DefaultColdStart = 20 * time.Second

// HTTP POSTs events in binary mode to a function's URL.
type HTTP struct {
	URL    string
	Client *http.Client
	// ColdStart bounds how long one delivery keeps retrying a function that
	// is scaling from zero (connection refused, 502, 503, 504) before the
	// delivery fails, retryably. It must stay well inside the caller's own
	// bound on one delivery (the source adapter's receive invisible
	// duration). DefaultColdStart when zero.
	ColdStart time.Duration
}

// NewHTTP returns an HTTP deliverer whose connection pool keeps one idle
// connection per worker: Go's default of two per host churns sockets.
func NewHTTP(url string, workers int, coldStart time.Duration) *HTTP {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = workers
	transport.MaxIdleConnsPerHost = workers
	return &HTTP{URL: url, Client: &http.Client{Transport: transport}, ColdStart: coldStart}
}

// Deliver POSTs ev and maps the answer (outcome.FromHTTP): 2xx success, 4xx
// permanent, 5xx and network errors retryable; the class's code and message
// are the stage's own when its answer carries an outcome.Body.
func (d *HTTP) Deliver(ctx context.Context, ev event.Event) error {
	coldStart := d.ColdStart
	if coldStart <= 0 {
		coldStart = DefaultColdStart
	}
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval = 100 * time.Millisecond
	policy.MaxInterval = 2 * time.Second
	ans, err := backoff.Retry(ctx, func() (answer, error) {
		ans, err := d.post(ctx, ev)
		if err == nil && !coldStartStatus(ans.status) {
			return ans, nil
		}
		if err != nil && !coldStartError(err) {
			return ans, backoff.Permanent(err)
		}
		if err == nil {
			err = fmt.Errorf("function answered %d", ans.status)
		}
		return ans, err
	}, backoff.WithBackOff(policy), backoff.WithMaxElapsedTime(coldStart))
	if err != nil {
		return outcome.Retryable("deliver.unreachable", fmt.Errorf("deliver to %s: %w", d.URL, err))
	}
	return outcome.FromHTTP(ans.status, ans.contentType, ans.body)
}

// answer is what a function answered one delivery with.
type answer struct {
	status      int
	contentType string
	body        []byte
}

func (d *HTTP) post(ctx context.Context, ev event.Event) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, nil)
	if err != nil {
		return answer{}, backoff.Permanent(err)
	}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req); err != nil {
		return answer{}, backoff.Permanent(fmt.Errorf("encode event: %w", err))
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	ans := answer{status: resp.StatusCode, contentType: resp.Header.Get("Content-Type")}
	if ans.status >= 300 {
		ans.body, _ = io.ReadAll(io.LimitReader(resp.Body, outcome.MaxBody))
	}
	// Drain (bounded) so the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, outcome.MaxBody))
	return ans, nil
}

// coldStartStatus: what Knative's activator or a not-yet-ready pod answers.
func coldStartStatus(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

// coldStartError: the function's port is not open yet, or the connection
// was dropped while it started.
func coldStartError(err error) bool {
	var netErr net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		(errors.As(err, &netErr) && netErr.Timeout())
}
