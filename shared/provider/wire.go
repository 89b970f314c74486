package provider

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// This file holds what every HTTP provider client needs the same way: how
// far a failed request got, a Retry-After read, provider text made safe to
// quote. The clients differ in their wire formats, not in these.

// MaxRetryAfter caps a provider's requested wait, so a garbled header
// cannot park a task for years.
const MaxRetryAfter = 24 * time.Hour

// WriteTrace records how far net/http got with a request, which decides
// whether a failed create may have reached the provider. The zero value is
// ready; attach it with With before the request is made.
type WriteTrace struct {
	started atomic.Bool // the transport began (GetConn fired)
	wrote   atomic.Bool // the whole request was written
}

// With returns ctx carrying the trace hooks.
func (w *WriteTrace) With(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn: func(string) { w.started.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				w.wrote.Store(true)
			}
		},
	})
}

// MayHaveArrived reports whether a request that failed with err may have
// reached the provider whole. A transport that reports no trace events
// (a custom RoundTripper) is trusted only for dial and DNS failures.
func (w *WriteTrace) MayHaveArrived(err error) bool {
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

// TransportError classifies a request that got no (complete) answer.
// unknown says the provider may have acted on it and its answer was lost.
func TransportError(op string, err error, unknown bool) *Error {
	// *url.Error repeats the request URL; an output URL is a secret.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if unknown {
		return &Error{Class: ClassTimeoutUnknown, Message: op + ": answer lost after the request was sent", Err: err}
	}
	return &Error{Class: ClassUnavailable, Message: op, Err: err}
}

// ParseRetryAfter reads a Retry-After value, seconds or an HTTP date,
// capped at [MaxRetryAfter]; ok is false when v is neither.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		if secs > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), MaxRetryAfter), true
	}
	return 0, false
}

// Shorten cuts s to at most n runes, on a rune boundary, and drops
// control characters so a quoted provider message stays one log line.
func Shorten(s string, n int) string {
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

// Scrubber returns a function that replaces secret (the prompt) in
// provider messages; secrets shorter than 4 runes are left, as replacing
// them would garble every message.
func Scrubber(secret string) func(string) string {
	return func(s string) string {
		if len(secret) < 4 {
			return s
		}
		return strings.ReplaceAll(s, secret, "[prompt]")
	}
}
