package replicate

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// Download streams a job's output. It checks the job first: no output URL
// on a succeeded job means Replicate removed the data (expired), and an
// [provider.Job.OutputExpiresAt] in the past is expired without a request.
//
// The answer maps as 404 → not ready (a file not yet on the CDN; past
// expiry the check above has already answered), 410 and 403 → expired (a
// removed file, a signed URL past its life), then the API's own classes.
// [Config.Timeout] bounds the wait for headers; the body streams for as
// long as ctx allows, and closing it releases everything.
func (c *Client) Download(ctx context.Context, job provider.Job) (provider.Output, error) {
	const op = "download output"
	if job.OutputURL == "" {
		switch {
		case job.Status == provider.StatusSucceeded:
			return provider.Output{}, &provider.Error{Class: provider.ClassOutputExpired, Message: op + ": output was removed"}
		case !job.Status.Terminal():
			return provider.Output{}, &provider.Error{Class: provider.ClassOutputNotReady, Message: op + ": job has not finished"}
		default:
			return provider.Output{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": job ended without output"}
		}
	}
	if !job.OutputExpiresAt.IsZero() && !c.now().Before(job.OutputExpiresAt) {
		return provider.Output{}, &provider.Error{Class: provider.ClassOutputExpired, Message: op + ": output retention has passed"}
	}
	u, err := url.Parse(job.OutputURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return provider.Output{}, &provider.Error{Class: provider.ClassMalformed, Message: op + ": output is not an http(s) URL"}
	}

	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		cancel()
		return provider.Output{}, &provider.Error{Class: provider.ClassMalformed, Message: op + ": output is not a usable URL"}
	}
	req.Header.Set("User-Agent", "aivedio-pipeline/replicate")
	if c.token != "" && c.trusted(u) {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	headers := time.AfterFunc(c.timeout, cancel)
	resp, err := c.http.Do(req)
	timedOut := !headers.Stop()
	if err != nil {
		cancel()
		return provider.Output{}, transportError(op, err, false)
	}
	if timedOut {
		// The headers came just as the deadline fired: the body is dead.
		resp.Body.Close()
		cancel()
		return provider.Output{}, &provider.Error{Class: provider.ClassUnavailable, Message: op + ": no answer within the timeout", Err: context.DeadlineExceeded}
	}
	if resp.StatusCode == http.StatusOK {
		return provider.Output{
			Body:          &streamBody{ReadCloser: resp.Body, cancel: cancel},
			ContentType:   resp.Header.Get("Content-Type"),
			ContentLength: resp.ContentLength,
		}, nil
	}
	defer cancel()
	defer resp.Body.Close()
	// Drained, never quoted: a storage error page can repeat the URL.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch resp.StatusCode {
	case http.StatusNotFound:
		return provider.Output{}, &provider.Error{Class: provider.ClassOutputNotReady, StatusCode: resp.StatusCode, Message: op + ": output not there yet"}
	case http.StatusGone, http.StatusForbidden:
		return provider.Output{}, &provider.Error{Class: provider.ClassOutputExpired, StatusCode: resp.StatusCode, Message: op + ": output URL no longer valid"}
	}
	return provider.Output{}, statusError(op, resp.StatusCode, resp.Header, nil, c.now(), nil)
}

// trusted reports whether the API token may go to u: the API's own host,
// or a configured output host or its subdomain.
func (c *Client) trusted(u *url.URL) bool {
	if c.sameOrigin(u) {
		return true
	}
	if u.Scheme != "https" {
		return false
	}
	host := strings.ToLower(u.Hostname())
	for _, h := range c.trustedHosts {
		h = strings.ToLower(h)
		if host == h || strings.HasSuffix(host, "."+h) {
			return true
		}
	}
	return false
}

// streamBody ends the download's context when the caller closes the body.
type streamBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *streamBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}
