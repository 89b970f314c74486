package provider

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// FetchParams is one output download.
type FetchParams struct {
	// Op names the call in errors: "download output".
	Op     string
	HTTP   *http.Client
	URL    *url.URL
	Header http.Header
	// HeaderTimeout bounds the wait for the response headers only; the
	// body streams for as long as ctx allows.
	HeaderTimeout time.Duration
	// Guard's scheme and size checks apply to every download; its
	// address check is made by HTTP when HTTP is Guard's own Client.
	Guard OutputGuard
}

// FetchOutput GETs an output URL and streams it: a 200 is returned as an
// [Output] whose Close releases everything, never read into memory. Any
// other status is drained (never quoted: a storage error page can repeat
// the signed URL) and returned with its header for the client to map, as
// each provider's storage says "not ready" and "expired" its own way. A
// request that got no answer is [ClassUnavailable]: a download changes
// nothing remotely.
//
// A download the guard refuses (not https, a host that is not public, an
// output over its cap) is a [*RefusedError].
func FetchOutput(ctx context.Context, p FetchParams) (out Output, status int, header http.Header, err error) {
	if err := p.Guard.checkScheme(p.Op, p.URL.Scheme); err != nil {
		return Output{}, 0, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL.String(), nil)
	if err != nil {
		cancel()
		return Output{}, 0, nil, &Error{Class: ClassMalformed, Message: p.Op + ": output is not a usable URL"}
	}
	for k, v := range p.Header {
		req.Header[k] = v
	}
	headers := time.AfterFunc(p.HeaderTimeout, cancel)
	resp, err := p.HTTP.Do(req)
	timedOut := !headers.Stop()
	if err != nil {
		cancel()
		if r, ok := refused(err); ok {
			return Output{}, 0, nil, r
		}
		return Output{}, 0, nil, TransportError(p.Op, err, false)
	}
	if timedOut {
		// The headers came just as the deadline fired: the body is dead.
		resp.Body.Close()
		cancel()
		return Output{}, 0, nil, &Error{Class: ClassUnavailable, Message: p.Op + ": no answer within the timeout", Err: context.DeadlineExceeded}
	}
	if resp.StatusCode == http.StatusOK {
		limit := p.Guard.maxBytes()
		body := &cappedBody{ReadCloser: resp.Body, left: limit, op: p.Op, max: limit}
		if resp.ContentLength > limit {
			resp.Body.Close()
			cancel()
			return Output{}, 0, nil, body.tooLarge()
		}
		return Output{
			Body:          &streamBody{ReadCloser: body, cancel: cancel},
			ContentType:   resp.Header.Get("Content-Type"),
			ContentLength: resp.ContentLength,
		}, resp.StatusCode, resp.Header, nil
	}
	defer cancel()
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	return Output{}, resp.StatusCode, resp.Header, nil
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

// ParseOutputURL checks a job's output URL before anything is sent there:
// an absolute http(s) URL, or [ClassMalformed].
func ParseOutputURL(op, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, &Error{Class: ClassMalformed, Message: op + ": output is not an http(s) URL"}
	}
	return u, nil
}

// OutputStatusError maps what output storage answers: 404 is
// [ClassOutputNotReady] (a file not on the CDN yet), any of expired is
// [ClassOutputExpired]. Other statuses return nil, for the client's own
// classification.
func OutputStatusError(op string, status int, expired ...int) *Error {
	switch {
	case status == http.StatusNotFound:
		return &Error{Class: ClassOutputNotReady, StatusCode: status, Message: op + ": output not there yet"}
	case slices.Contains(expired, status):
		return &Error{Class: ClassOutputExpired, StatusCode: status, Message: op + ": output URL no longer valid"}
	}
	return nil
}
