package replicate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// CodeLookupAmbiguous is the [provider.Error] Code of a
// FindByClientRequestID that cannot tell whether the job exists.
const CodeLookupAmbiguous = "lookup_ambiguous"

// statusError classifies a non-2xx answer.
func statusError(op string, status int, header http.Header, body []byte, now time.Time, scrub func(string) string) *provider.Error {
	detail := providerDetail(body)
	if scrub != nil {
		detail = scrub(detail)
	}
	// Read before shortening, which could cut a trailing "(E005)".
	sensitive := flaggedSensitive(detail)
	detail = provider.Shorten(detail, 200)
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
	case status >= 400 && status <= 499 && sensitive:
		// The safety check refused the input before a prediction ran.
		e.Class, e.Code = provider.ClassContentRejected, CodeSensitive
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
	if d, ok := provider.ParseRetryAfter(header, now); ok {
		return d
	}
	if m := throttleDetail.FindStringSubmatch(detail); m != nil {
		n, _ := strconv.Atoi(m[1])
		return min(time.Duration(n)*time.Second, provider.MaxRetryAfter)
	}
	return 0
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
