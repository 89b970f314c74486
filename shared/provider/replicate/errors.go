package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aivedio/pipeline/shared/provider"
)

// CodeLookupAmbiguous is the [provider.Error] Code of a
// FindByClientRequestID that cannot tell whether the job exists.
const CodeLookupAmbiguous = "lookup_ambiguous"

// maxRetryAfter caps a provider's requested wait, so a garbled header
// cannot park a task for years.
const maxRetryAfter = 24 * time.Hour

// writeTrace records how far net/http got with a request, which decides
// whether a failed submit may have reached the provider.
type writeTrace struct {
	started atomic.Bool // the transport began (GetConn fired)
	wrote   atomic.Bool // the whole request was written
}

func (w *writeTrace) with(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { w.started.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				w.wrote.Store(true)
			}
		},
	})
}

// mayHaveArrived reports whether a request that failed with err may have
// reached the provider whole. A transport that reports no trace events
// (a custom RoundTripper) is trusted only for dial and DNS failures.
func (w *writeTrace) mayHaveArrived(err error) bool {
	if w.wrote.Load() {
		return true
	}
	if w.started.Load() {
		return false
	}
	var op *net.OpError
	var dns *net.DNSError
	if (errors.As(err, &op) && op.Op == "dial") || errors.As(err, &dns) {
		return false
	}
	return true
}

// transportError classifies a request that got no (complete) answer.
// unknown says the provider may have acted on it and its answer was lost.
func transportError(op string, err error, unknown bool) *provider.Error {
	// *url.Error repeats the request URL; an output URL is a secret.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if unknown {
		return &provider.Error{Class: provider.ClassTimeoutUnknown, Message: op + ": answer lost after the request was sent", Err: err}
	}
	return &provider.Error{Class: provider.ClassUnavailable, Message: op, Err: err}
}

// statusError classifies a non-2xx answer.
func statusError(op string, status int, header http.Header, body []byte, now time.Time, scrub func(string) string) *provider.Error {
	detail := providerDetail(body)
	if scrub != nil {
		detail = scrub(detail)
	}
	detail = shorten(detail, 200)
	msg := op
	if detail != "" {
		msg += ": " + detail
	}
	e := &provider.Error{StatusCode: status, Message: msg}
	switch {
	case status == http.StatusTooManyRequests:
		e.Class = provider.ClassRateLimited
		e.RetryAfter = retryAfter(header.Get("Retry-After"), detail, now)
	case status == http.StatusNotFound:
		e.Class = provider.ClassNotFound
	case status == http.StatusRequestTimeout:
		// The server gave up before it had the request: nothing happened.
		e.Class = provider.ClassUnavailable
	case status >= 500 && status <= 599:
		e.Class = provider.ClassUnavailable
		e.RetryAfter = retryAfter(header.Get("Retry-After"), "", now)
	case status >= 400 && status <= 499:
		e.Class = provider.ClassRejected
	default:
		// 1xx leftovers and redirects the client did not follow are not
		// part of the documented API.
		e.Class = provider.ClassMalformed
		e.Err = fmt.Errorf("unexpected HTTP status %d", status)
	}
	return e
}

// throttleDetail matches Replicate's 429 detail: "Request was throttled.
// Your rate limit resets in ~30s."
var throttleDetail = regexp.MustCompile(`resets in ~?(\d{1,6})\s*s`)

// retryAfter reads a Retry-After header, seconds or an HTTP date, falling
// back to the wait named in Replicate's throttle detail.
func retryAfter(header, detail string, now time.Time) time.Duration {
	if d, ok := parseRetryAfter(header, now); ok {
		return d
	}
	if m := throttleDetail.FindStringSubmatch(detail); m != nil {
		n, _ := strconv.Atoi(m[1])
		return min(time.Duration(n)*time.Second, maxRetryAfter)
	}
	return 0
}

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter), true
	}
	return 0, false
}

// providerDetail takes the human part of an error body: Replicate answers
// {"detail": "..."}, sometimes as a problem document with a title too.
// Anything else is not quoted.
func providerDetail(body []byte) string {
	var p struct {
		Title  string `json:"title"`
		Detail string `json:"detail"`
	}
	if json.Unmarshal(body, &p) != nil {
		return ""
	}
	switch {
	case p.Detail != "" && p.Title != "" && !strings.Contains(p.Detail, p.Title):
		return p.Title + ": " + p.Detail
	case p.Detail != "":
		return p.Detail
	}
	return p.Title
}

// shorten cuts s to at most n runes, on a rune boundary, and drops
// control characters so a quoted message stays one log line.
func shorten(s string, n int) string {
	var b strings.Builder
	for _, r := range s {
		if n == 0 {
			b.WriteString("…")
			break
		}
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			r = ' '
		}
		b.WriteRune(r)
		n--
	}
	return strings.TrimSpace(b.String())
}

// scrubber removes secret from provider messages.
func scrubber(secret string) func(string) string {
	return func(s string) string {
		if len(secret) < 4 {
			return s
		}
		return strings.ReplaceAll(s, secret, "[prompt]")
	}
}
