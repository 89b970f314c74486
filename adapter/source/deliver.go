package source

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

// Deliverer hands one CloudEvent to a stage function. Its error is
// classified with package outcome: permanent means quarantine, anything else
// retry.
type Deliverer interface {
	Deliver(ctx context.Context, ev event.Event) error
}

// HandlerFunc is a stage function's Handle, called in process.
type HandlerFunc func(ctx context.Context, ev event.Event) (*event.Event, error)

// Deliver calls the handler and classifies its result the way the HTTP
// path would: a CloudEvents HTTP result with a 4xx status is permanent.
func (f HandlerFunc) Deliver(ctx context.Context, ev event.Event) error {
	_, err := f(ctx, ev)
	return classifyResult(err)
}

// HTTPDeliverer POSTs events in binary mode to a function's URL.
type HTTPDeliverer struct {
	URL    string
	Client *http.Client
	// ColdStart bounds how long one delivery keeps retrying a function that
	// is scaling from zero (connection refused, 502, 503, 504) before the
	// message is handed back to the broker. It must stay well inside the
	// receive invisible duration.
	ColdStart time.Duration
}

// NewHTTPDeliverer returns a deliverer whose connection pool keeps one idle
// connection per worker: Go's default of two per host churns sockets.
func NewHTTPDeliverer(url string, workers int, coldStart time.Duration) *HTTPDeliverer {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns = workers
	transport.MaxIdleConnsPerHost = workers
	return &HTTPDeliverer{URL: url, Client: &http.Client{Transport: transport}, ColdStart: coldStart}
}

// Deliver POSTs ev and maps the status: 2xx success, 4xx permanent, 5xx and
// network errors retryable.
func (d *HTTPDeliverer) Deliver(ctx context.Context, ev event.Event) error {
	coldStart := d.ColdStart
	if coldStart <= 0 {
		coldStart = 20 * time.Second
	}
	policy := backoff.NewExponentialBackOff()
	policy.InitialInterval = 100 * time.Millisecond
	policy.MaxInterval = 2 * time.Second
	status, err := backoff.Retry(ctx, func() (int, error) {
		status, err := d.post(ctx, ev)
		if err == nil && !coldStartStatus(status) {
			return status, nil
		}
		if err != nil && !coldStartError(err) {
			return 0, backoff.Permanent(err)
		}
		if err == nil {
			err = fmt.Errorf("function answered %d", status)
		}
		return status, err
	}, backoff.WithBackOff(policy), backoff.WithMaxElapsedTime(coldStart))
	switch {
	case err != nil:
		return outcome.Retryable("deliver.unreachable", fmt.Errorf("deliver to %s: %w", d.URL, err))
	case status >= 200 && status < 300:
		return nil
	case status >= 400 && status < 500:
		return outcome.Permanent(fmt.Sprintf("http.%d", status), fmt.Errorf("function refused the event with %d", status))
	default:
		return outcome.Retryable(fmt.Sprintf("http.%d", status), fmt.Errorf("function failed with %d", status))
	}
}

func (d *HTTPDeliverer) post(ctx context.Context, ev event.Event) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, nil)
	if err != nil {
		return 0, backoff.Permanent(err)
	}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req); err != nil {
		return 0, backoff.Permanent(fmt.Errorf("encode event: %w", err))
	}
	resp, err := d.Client.Do(req)
	if err != nil {
		return 0, err
	}
	// Drain (bounded) so the connection goes back to the pool.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
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

// classifyResult maps an in-process handler's error like its HTTP status
// would be mapped.
func classifyResult(err error) error {
	if err == nil {
		return nil
	}
	var result *cehttp.Result
	if errors.As(err, &result) {
		switch {
		case result.StatusCode >= 200 && result.StatusCode < 300:
			return nil
		case result.StatusCode >= 400 && result.StatusCode < 500:
			// A Result does not unwrap; rebuilding its message with %w
			// recovers the stage's own classification and code.
			if inner := fmt.Errorf(result.Format, result.Args...); outcome.IsPermanent(inner) {
				return inner
			}
			return outcome.Permanent(fmt.Sprintf("http.%d", result.StatusCode), err)
		}
	}
	if outcome.IsPermanent(err) {
		return err
	}
	return outcome.Retryable("handler.failed", err)
}
