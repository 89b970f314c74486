package provider

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"
)

// ErrAnswerTooLarge is returned by [Exchange] for a 2xx answer over
// [ExchangeParams.MaxBody]: the provider acted, but what it said cannot
// be read. Clients report it as [ClassMalformed].
var ErrAnswerTooLarge = errors.New("answer larger than the client reads")

// ExchangeParams is one JSON request to a provider's API.
type ExchangeParams struct {
	Op     string // names the call in errors: "create task"
	Method string
	URL    string
	Body   []byte // nil sends none
	Header http.Header
	// Creates marks a call whose lost answer may have started a remote
	// job: such a failure after the request was written is
	// [ClassTimeoutUnknown] instead of [ClassUnavailable].
	Creates bool
	Timeout time.Duration
	MaxBody int
}

// Answer is what the provider said: any status, for the client to map.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
}

// OK reports a 2xx status.
func (a Answer) OK() bool { return a.Status >= 200 && a.Status < 300 }

// Exchange sends p and reads the answer, at most MaxBody bytes of it. An
// error means no complete answer came: it is classified already, by
// whether the request may have reached the provider. A body that could
// not be read on a non-2xx answer is dropped, as it would only be quoted.
func Exchange(ctx context.Context, client *http.Client, p ExchangeParams) (Answer, error) {
	if err := ctx.Err(); err != nil {
		// Nothing was sent; without this check an untraced early return
		// would count as possibly sent.
		return Answer{}, TransportError(p.Op, err, false)
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	var tr WriteTrace
	req, err := http.NewRequestWithContext(tr.With(ctx), p.Method, p.URL, nil)
	if err != nil {
		// Not wrapped: the parse error would quote the URL.
		return Answer{}, &Error{Class: ClassRejected, Message: p.Op + ": cannot build request"}
	}
	if p.Body != nil {
		// Deliberately no GetBody: without it net/http never replays the
		// request on a reused connection, which it would otherwise do for
		// some requests. A silent replay of a create could start a second
		// job; a lost answer must surface as timeout-unknown instead.
		req.Body = io.NopCloser(bytes.NewReader(p.Body))
		req.ContentLength = int64(len(p.Body))
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range p.Header {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{}, TransportError(p.Op, err, p.Creates && tr.MayHaveArrived(err))
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, int64(p.MaxBody)+1))
	a := Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}
	switch {
	case readErr != nil && a.OK():
		// The provider acted on the request; only its answer was lost.
		return Answer{}, TransportError(p.Op+": read answer", readErr, p.Creates)
	case readErr != nil:
		a.Body = nil
	case len(body) > p.MaxBody && a.OK():
		return a, ErrAnswerTooLarge
	case len(body) > p.MaxBody:
		a.Body = body[:p.MaxBody]
	}
	return a, nil
}
