package runway

import (
	"context"
	"net/http"

	"github.com/aivedio/pipeline/shared/provider"
)

// Download streams a succeeded task's output. The API key is never sent:
// Runway's output URLs are signed and carry their own authority.
//
// A job whose [provider.Job.OutputExpiresAt] has passed is expired without
// a request. The answer maps as 404 → not ready (not on the CDN yet),
// 401, 403 and 410 → expired (a signature past its life; the CDN answers
// 403), then the API's own classes. [Config.Timeout] bounds the wait for
// headers; the body streams for as long as ctx allows.
func (c *Client) Download(ctx context.Context, job provider.Job) (provider.Output, error) {
	const op = "download output"
	if job.OutputURL == "" {
		if job.Status.Terminal() && job.Status != provider.StatusSucceeded {
			return provider.Output{}, &provider.Error{Class: provider.ClassRejected, Message: op + ": task ended without output"}
		}
		return provider.Output{}, &provider.Error{Class: provider.ClassOutputNotReady, Message: op + ": task has no output yet"}
	}
	if !job.OutputExpiresAt.IsZero() && !c.now().Before(job.OutputExpiresAt) {
		return provider.Output{}, &provider.Error{Class: provider.ClassOutputExpired, Message: op + ": output URL has expired"}
	}
	u, err := provider.ParseOutputURL(op, job.OutputURL)
	if err != nil {
		return provider.Output{}, err
	}
	out, status, header, err := provider.FetchOutput(ctx, provider.FetchParams{
		Op: op, HTTP: c.download, URL: u, Guard: c.outputs, HeaderTimeout: c.timeout,
		Header: http.Header{"User-Agent": {"aivedio-pipeline/runway"}},
	})
	switch {
	case err != nil:
		return provider.Output{}, err
	case status == http.StatusOK:
		return out, nil
	}
	if e := provider.OutputStatusError(op, status, http.StatusGone, http.StatusForbidden, http.StatusUnauthorized); e != nil {
		return provider.Output{}, e
	}
	return provider.Output{}, statusError(apiCall{op: op}, status, header, nil, c.now())
}
