package outcome

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/protocol"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// A stage function answers a failed delivery with an HTTP status (4xx
// permanent, 5xx retryable) and a small JSON body that keeps the failure's
// class and code, so that a quarantine row and the adapter's metrics name
// the stage's reason ("security.tenant_mismatch") and not only the status:
//
//	{"error": {"class": "permanent", "code": "security.tenant_mismatch", "message": "..."}}
//
// The status is Knative Eventing's knativeerrorcode and this body its
// knativeerrordata, as a dispatcher would attach them to an event it
// dead-letters; the adapter reads the same two.

// ContentType is the media type of a failure body.
const ContentType = "application/json"

// Body is the JSON a function answers a failed delivery with.
type Body struct {
	Error BodyError `json:"error"`
}

// BodyError is a failure's class, code and message.
type BodyError struct {
	Class   Class  `json:"class"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// RetryAfterMS is a retryable failure's [RetryAfter], in milliseconds.
	RetryAfterMS int64 `json:"retry_after_ms,omitempty"`
}

// BodyOf is err's class, code and message as a [Body].
func BodyOf(err error) Body {
	class, code := Of(err)
	b := Body{Error: BodyError{Class: class, Code: code, Message: err.Error()}}
	if d, ok := RetryAfterOf(err); ok {
		b.Error.RetryAfterMS = d.Milliseconds()
	}
	return b
}

// WriteHTTP answers a failed delivery with status and err's [Body].
func WriteHTTP(w http.ResponseWriter, status int, err error) {
	b, merr := json.Marshal(BodyOf(err))
	if merr != nil { // a Body of strings always marshals
		b = []byte(`{"error":{"class":"retryable","code":"unclassified","message":"unencodable error"}}`)
	}
	w.Header().Set("Content-Type", ContentType)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// MaxBody bounds how much of a function's answer a caller reads for
// [FromHTTP]; a failure body is far smaller.
const MaxBody = 64 << 10

// ResultOf is the HTTP status a function answers its handler's err with,
// and the error the handler classified. A CloudEvents HTTP result carries
// its status, but does not unwrap: its format and arguments rebuild the
// error inside. Any other error answers 422 when it is permanent and 500
// otherwise.
func ResultOf(err error) (int, error) {
	var result *cehttp.Result
	if protocol.ResultAs(err, &result) && result.StatusCode >= 100 && result.StatusCode < 600 {
		return result.StatusCode, fmt.Errorf(result.Format, result.Args...)
	}
	if IsPermanent(err) {
		return http.StatusUnprocessableEntity, err
	}
	return http.StatusInternalServerError, err
}

// FromHTTP classifies a function's answer to a delivery: nil for a 2xx; for
// a 4xx a permanent error, for anything else a retryable one. The code and
// message come from a failure [Body] when the answer carries one, and are
// "http.<status>" and the status otherwise (a function that is not one of
// ours, a proxy's error page). The status decides the class: a body cannot
// make a 5xx permanent.
func FromHTTP(status int, contentType string, body []byte) error {
	b, ok := parseBody(contentType, body)
	return classify(status, b, ok)
}

// FromResult classifies a handler's answer called in process exactly as
// [FromHTTP] classifies the same answer sent over HTTP: the same class,
// code and message, so a quarantine row does not depend on the path.
func FromResult(err error) error {
	if err == nil {
		return nil
	}
	status, cause := ResultOf(err)
	return classify(status, BodyOf(cause), true)
}

const unclassified = "unclassified"

func classify(status int, b Body, haveBody bool) error {
	if status >= 200 && status < 300 {
		return nil
	}
	class := ClassRetryable
	if status >= 400 && status < 500 {
		class = ClassPermanent
	}
	code := fmt.Sprintf("http.%d", status)
	msg := fmt.Sprintf("function answered %d", status)
	if haveBody {
		if b.Error.Message != "" {
			msg = b.Error.Message
		}
		// An unmarked error names no reason of its own: the status says more.
		if b.Error.Code != "" && b.Error.Code != unclassified {
			code = b.Error.Code
		}
	}
	e := &Error{Class: class, Code: code, Err: errors.New(msg)}
	if haveBody && class == ClassRetryable && b.Error.RetryAfterMS > 0 {
		e.RetryAfter = time.Duration(b.Error.RetryAfterMS) * time.Millisecond
	}
	return e
}

func parseBody(contentType string, body []byte) (Body, bool) {
	var b Body
	if mt, _, err := mime.ParseMediaType(contentType); err != nil || mt != ContentType {
		return b, false
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return b, false
	}
	return b, true
}
