package replicate

import (
	"context"
	"net/http"
	"net/url"
	"strings"

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
	u, err := provider.ParseOutputURL(op, job.OutputURL)
	if err != nil {
		return provider.Output{}, err
	}

	header := http.Header{"User-Agent": {"aivedio-pipeline/replicate"}}
	if c.token != "" && c.trusted(u) {
		header.Set("Authorization", "Bearer "+c.token)
	}
	out, status, respHeader, err := provider.FetchOutput(ctx, provider.FetchParams{Op: op, HTTP: c.download, URL: u, Guard: c.outputs, Header: header, HeaderTimeout: c.timeout})
	switch {
	case err != nil:
		return provider.Output{}, err
	case status == http.StatusOK:
		return out, nil
	}
	if e := provider.OutputStatusError(op, status, http.StatusGone, http.StatusForbidden); e != nil {
		return provider.Output{}, e
	}
	return provider.Output{}, statusError(op, status, respHeader, nil, c.now(), nil)
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
