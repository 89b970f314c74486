package runway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// Codes of the [provider.Error]s this client makes itself.
const (
	// CodeLookupUnsupported: Runway cannot find a task by our client
	// request id, so whether a lost create started one cannot be told.
	CodeLookupUnsupported = provider.CodeLookupUnsupported
	// CodeUnsupported: [Client.Supports] refused the request before it
	// was sent.
	CodeUnsupported = "unsupported"
	// ErrorCodeFailed is a failed job's ErrorCode when Runway gave no
	// failureCode.
	ErrorCodeFailed = "task_failed"
)

// errorBody is Runway's error answer: "a JSON response with an error
// member with a human-readable explanation". Code and FailureCode are not
// documented for errors; they are read so that a moderation refusal that
// names its SAFETY.* code is classified by the code, never by the text.
type errorBody struct {
	Error       string `json:"error"`
	Code        string `json:"code"`
	FailureCode string `json:"failureCode"`
}

// IsModerationCode reports whether a Runway failureCode is a content
// moderation outcome: SAFETY.INPUT.*, SAFETY.OUTPUT.* and
// INPUT_PREPROCESSING.SAFETY.* (task failures page). Those must not be
// retried, here or elsewhere.
func IsModerationCode(code string) bool {
	for _, prefix := range []string{"SAFETY", "INPUT_PREPROCESSING.SAFETY"} {
		if code == prefix || strings.HasPrefix(code, prefix+".") {
			return true
		}
	}
	return false
}

// statusError classifies a non-2xx answer to call.
func statusError(call apiCall, status int, header http.Header, body []byte, now time.Time) *provider.Error {
	var eb errorBody
	_ = json.Unmarshal(body, &eb) // anything else is simply not quoted
	detail := eb.Error
	if call.scrub != nil {
		detail = call.scrub(detail)
	}
	msg := call.op
	if detail = provider.Shorten(detail, 200); detail != "" {
		msg += ": " + detail
	}
	e := &provider.Error{StatusCode: status, Message: msg}
	code := eb.FailureCode
	if code == "" {
		code = eb.Code
	}
	switch {
	case status == http.StatusTooManyRequests:
		// Runway's 429 is the daily generation limit (usage tiers page);
		// the concurrency limit shows as THROTTLED tasks instead.
		e.Class = provider.ClassRateLimited
		e.RetryAfter, _ = provider.ParseRetryAfter(header.Get("Retry-After"), now)
	case status == http.StatusServiceUnavailable:
		// Shedding load: the request was turned away whole.
		e.Class = provider.ClassUnavailable
		e.RetryAfter, _ = provider.ParseRetryAfter(header.Get("Retry-After"), now)
	case status >= 500 && status <= 599 && call.create:
		// 500, 502 and 504 can come after Runway stored the task, and
		// with no idempotency key a repeat could start a second one.
		e.Class = provider.ClassTimeoutUnknown
	case status >= 500 && status <= 599:
		e.Class = provider.ClassUnavailable
		e.RetryAfter, _ = provider.ParseRetryAfter(header.Get("Retry-After"), now)
	case status == http.StatusRequestTimeout:
		e.Class = provider.ClassUnavailable
	case status == http.StatusBadRequest && call.create && IsModerationCode(code):
		e.Class, e.Code = provider.ClassContentRejected, code
	case status == http.StatusNotFound && !call.create:
		e.Class = provider.ClassNotFound
	case status >= 400 && status <= 499:
		e.Class = provider.ClassRejected
		e.Code = code
	default:
		e.Class = provider.ClassMalformed
		e.Err = fmt.Errorf("unexpected HTTP status %d", status)
	}
	return e
}
