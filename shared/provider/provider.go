// Package provider is the boundary to hosted video-generation APIs
// (docs/design.md §8): the Client interface every provider implements, the job
// model the stages read, and the error classes the stages decide on.
//
// A provider call is never made inside a database transaction: the submit
// stage commits its attempt first, calls, then records the answer in a new
// transaction. Every method is safe for concurrent use.
package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// SubmitRequest asks a provider to start one generation.
type SubmitRequest struct {
	// IdempotencyKey is stable per attempt (task_attempts.provider_idempotency_key):
	// a retried submit with the same key must not start a second remote job.
	IdempotencyKey string
	// ClientRequestID is our id for the request, used to find the remote job
	// when the submit response was lost (FindByClientRequestID).
	ClientRequestID string
	Model           string
	Prompt          string
	DurationSeconds int
	Resolution      string // WIDTHxHEIGHT, e.g. 1280x720
	// CallbackURL, when set, receives the provider's completion callback.
	CallbackURL string
}

// Status is a remote job's state.
type Status string

// The job states, normalised across providers.
const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCanceled  Status = "canceled"
)

// Terminal reports whether the job will not change any more.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCanceled
}

// Job is a provider's view of one remote generation.
type Job struct {
	ID              string
	ClientRequestID string // empty when the provider does not echo it
	Status          Status
	Progress        int // 0..100, best effort
	// OutputURL is where a succeeded job's video is downloaded from. It may
	// answer "not ready" for a while after success, and it expires.
	OutputURL       string
	OutputExpiresAt time.Time // zero when unknown
	ErrorCode       string    // set for failed jobs
	ErrorMessage    string
	// ContentRejected marks a failed job the provider stopped for its
	// content policy (a moderation refusal of the prompt or the output):
	// the task fails as content_rejected, never retried nor sent to
	// another provider (seed 7.10.3).
	ContentRejected bool
	// Throttled marks a queued job the provider holds back for the
	// account's own concurrency limit (Runway's THROTTLED): a wait like a
	// 429, polled with backoff, not progress.
	Throttled bool
	CreatedAt time.Time
}

// Output is a downloaded video stream. The caller closes Body.
type Output struct {
	Body          io.ReadCloser
	ContentType   string
	ContentLength int64 // -1 when unknown
}

// Client talks to one provider.
type Client interface {
	// Name is the provider's name as stored in task_attempts.provider and
	// used in /v1/provider-callbacks/{provider}.
	Name() string
	// Submit starts a job. A lost response (timeout after the request was
	// sent) is an error of class ClassTimeoutUnknown: the job may exist.
	Submit(ctx context.Context, req SubmitRequest) (Job, error)
	// Get returns a job's current state.
	Get(ctx context.Context, jobID string) (Job, error)
	// FindByClientRequestID looks for the job a submit with this client
	// request id created, among jobs created at or after since. A job that
	// does not exist is an error of class ClassNotFound.
	FindByClientRequestID(ctx context.Context, clientRequestID string, since time.Time) (Job, error)
	// Cancel asks the provider to stop a job and returns its state after
	// the request: canceled, or already terminal.
	Cancel(ctx context.Context, jobID string) (Job, error)
	// Download streams a succeeded job's output. Not ready yet is
	// ClassOutputNotReady; an expired URL is ClassOutputExpired.
	Download(ctx context.Context, job Job) (Output, error)
	// ParseCallback verifies a completion callback's signature and
	// timestamp and returns the job it reports. A bad signature or a stale
	// timestamp is ClassRejected.
	ParseCallback(header http.Header, body []byte, now time.Time) (Job, error)
}

// Capable is implemented by a [Client] that can tell, before a submit,
// whether it can serve a request at all (a model, aspect ratio or duration
// the provider does not offer). A router asks it before choosing the
// provider, so a request no provider can serve fails at once instead of
// after a rejected submit; a Client without it is taken to accept anything
// and lets the provider's answer decide. An unsupported request is a
// [ClassRejected] *Error that names what is unsupported.
type Capable interface {
	Supports(SubmitRequest) error
}

// Class is what a provider failure means for the caller.
type Class string

// The error classes of docs/design.md §8, plus the download and lookup cases.
const (
	// ClassRateLimited: 429; wait RetryAfter and try again.
	ClassRateLimited Class = "rate_limited"
	// ClassUnavailable: 5xx, connection refused, a timeout before anything
	// was sent; safe to retry with the same idempotency key.
	ClassUnavailable Class = "unavailable"
	// ClassRejected: the provider refused the request (4xx other than 429,
	// bad callback signature); retrying will not help.
	ClassRejected Class = "rejected"
	// ClassContentRejected: the provider's content policy refused the
	// request (its moderation of the prompt or input). The task fails;
	// neither a retry nor another provider may get around the review
	// (seed 7.10.3).
	ClassContentRejected Class = "content_rejected"
	// ClassTimeoutUnknown: the request may have been accepted; the answer
	// was lost. Reconcile before submitting again.
	ClassTimeoutUnknown Class = "timeout_unknown"
	// ClassNotFound: the job does not exist.
	ClassNotFound Class = "not_found"
	// ClassOutputNotReady: the job succeeded but its output cannot be
	// downloaded yet.
	ClassOutputNotReady Class = "output_not_ready"
	// ClassOutputExpired: the output URL expired.
	ClassOutputExpired Class = "output_expired"
	// ClassMalformed: the provider answered something that is not its
	// documented format.
	ClassMalformed Class = "malformed"
)

// CodeContentRejected is the task error code of a generation a content
// policy refused: the provider's, at submit or when its job failed for it.
// The task is FAILED and its reservation released; it is neither retried
// nor sent to another provider.
const CodeContentRejected = "content_rejected"

// CodeLookupUnsupported is the [Error] Code of FindByClientRequestID at a
// provider whose API offers no way to find a job by our request id (no
// listing, no metadata echoed). A lost submit there can never be resolved
// by asking: the reconciler hands the task to a person at once.
const CodeLookupUnsupported = "lookup_unsupported"

// Error is a classified provider failure.
type Error struct {
	Class      Class
	StatusCode int           // HTTP status, 0 when none
	RetryAfter time.Duration // from Retry-After, 0 when absent
	Code       string        // provider's error code, when it gave one
	Message    string
	Err        error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("provider %s", e.Class)
	if e.StatusCode != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.StatusCode)
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns err's class; an unclassified error counts as unavailable
// (retry with the same key), nil as "".
func ClassOf(err error) Class {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Class
	}
	return ClassUnavailable
}

// RetryAfterOf returns the wait a provider asked for, 0 when none.
func RetryAfterOf(err error) time.Duration {
	var e *Error
	if errors.As(err, &e) {
		return e.RetryAfter
	}
	return 0
}

// RefusedOutright reports whether err is a provider's refusal that created
// nothing: a 429, a 503 or 408, a request that was never sent (connection
// refused, an open circuit), or a rejection. Other server errors (500, 502,
// 504) may come after the provider created the job, so they do not count:
// an attempt may leave for another provider only when every send it made
// was refused outright.
func RefusedOutright(err error) bool {
	var e *Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Class {
	case ClassRateLimited, ClassRejected, ClassContentRejected:
		return true
	case ClassUnavailable:
		return e.Code == "circuit_open" || e.StatusCode == 0 ||
			e.StatusCode == http.StatusServiceUnavailable || e.StatusCode == http.StatusRequestTimeout
	}
	return false
}

// CodeOf returns err's provider error code, "" when it has none.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Deduper is a client whose provider starts no second job for a submit
// sent again with the same idempotency key.
type Deduper interface {
	DedupsByIdempotencyKey() bool
}

// ResendSafe reports whether a submit c may have acted on can be sent
// again under the same key without risking a second paid job: only when
// its provider dedups by the key. Elsewhere (Runway) a send that went out
// unanswered is looked up first, as after a lost answer.
func ResendSafe(c Client) bool {
	d, ok := c.(Deduper)
	return ok && d.DedupsByIdempotencyKey()
}
