package api

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error codes: the machine-readable part of every error response. They are
// part of the API contract; add codes, never rename them.
const (
	CodeMalformedJSON          = "malformed_json"           // 400: the body is not one JSON object
	CodeUnknownField           = "unknown_field"            // 400: the body names a field the endpoint does not take
	CodeInvalidField           = "invalid_field"            // 400: a field is missing, of the wrong type or out of range
	CodeInvalidIdempotencyKey  = "invalid_idempotency_key"  // 400: Idempotency-Key missing or malformed
	CodeInvalidID              = "invalid_id"               // 400: a path id is not a UUID
	CodeInvalidCallback        = "invalid_callback"         // 400: a provider callback could not be read
	CodeUnauthenticated        = "unauthenticated"          // 401: no, unknown or revoked API key
	CodeInvalidSignature       = "invalid_signature"        // 401: a callback's signature or timestamp did not verify
	CodeInsufficientCredits    = "insufficient_credits"     // 402: the tenant cannot pay for the generation
	CodeForbidden              = "forbidden"                // 403: the key's role may not use the endpoint
	CodeNotFound               = "not_found"                // 404: no such resource (for this tenant)
	CodeUnknownProvider        = "unknown_provider"         // 404: no callback verifier for the provider
	CodeMethodNotAllowed       = "method_not_allowed"       // 405
	CodeIdempotencyConflict    = "idempotency_conflict"     // 409: Idempotency-Key reused with another request
	CodeNotUploaded            = "not_uploaded"             // 409: an upload is completed before its file was PUT
	CodeQuotaExceeded          = "quota_exceeded"           // 409: the tenant (or project) holds the most it may; the message names the limit
	CodeUploadMismatch         = "upload_mismatch"          // 422: the uploaded file's size or sha256 is not the one announced
	CodeInvalidTimeline        = "invalid_timeline"         // 400/422: a timeline that cannot be read or rendered (the message names the element)
	CodeTaskFinished           = "task_finished"            // 409: the task is terminal and cannot be canceled
	CodeBusy                   = "busy"                     // 409: the task kept changing under the request; retry
	CodeBodyTooLarge           = "body_too_large"           // 413
	CodeUnsupportedMediaType   = "unsupported_media_type"   // 415: the body is not application/json
	CodeTooManyStreams         = "too_many_streams"         // 429: the tenant has too many event streams open
	CodeInternal               = "internal"                 // 500: our fault; the message says nothing more
	CodeEventStreamUnavailable = "event_stream_unavailable" // 503: live events are down for a moment; retry
	CodeUploadsUnavailable     = "uploads_unavailable"      // 503: the deployment has no object storage for uploads
	CodeUploadCheckSlow        = "upload_check_slow"        // 503: an upload could not be read back in time to check it; retry
)

// apiError is an error response: the status, the code and a message a
// person can act on. Handlers return it; writeError renders it.
type apiError struct {
	Status  int
	Code    string
	Message string
	// Header is set on the response as well, e.g. Retry-After.
	Header http.Header
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

func errorf(status int, code, format string, args ...any) *apiError {
	return &apiError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// errInternal is the response to every failure that is ours. The cause is
// logged, never sent.
var errInternal = &apiError{Status: http.StatusInternalServerError, Code: CodeInternal,
	Message: "internal error; retry later, and if it persists report the X-Request-Id of this response"}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, e *apiError) {
	for k, vs := range e.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	var body errorBody
	body.Error.Code = e.Code
	body.Error.Message = e.Message
	writeJSON(w, e.Status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own response types are encoded here; they always marshal.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
