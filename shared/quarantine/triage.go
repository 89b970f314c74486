package quarantine

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"unicode/utf8"
)

// Category is seed 7.12.2's triage of a quarantined message: who has to act
// and how, derived from its error code by [Categorize].
type Category string

// The categories.
const (
	// CodeDefect: the consumer or the producer is wrong (a schema the
	// consumer does not know, an event routed to a stage that does not
	// handle it, an id reused for another payload, an error nobody
	// classified). Fix the code, deploy, then replay.
	CodeDefect Category = "CODE_DEFECT"
	// DataDefect: the message itself is wrong (unreadable, a missing or
	// invalid field, an object key that is no key). Replaying the same
	// bytes fails the same way; discard it, or fix the producer.
	DataDefect Category = "DATA_DEFECT"
	// Permission: the message is not allowed to do what it asks (another
	// tenant's task, a provider job that is not ours). Never replayed
	// blindly: discard it or escalate.
	Permission Category = "PERMISSION"
	// Dependency: the handler kept failing on something it depends on (the
	// provider, PostgreSQL, S3, ffmpeg, the function's own endpoint) until
	// the broker gave up. Replay once the dependency is healthy.
	Dependency Category = "DEPENDENCY"
	// DirtyHistory: the message refers to something that no longer
	// matches (a task, render, asset or reservation that does not exist).
	// Usually discarded after a look at what removed it.
	DirtyHistory Category = "DIRTY_HISTORY"
)

// Categories lists every category, in the order they are reported.
func Categories() []Category {
	return []Category{CodeDefect, DataDefect, Permission, Dependency, DirtyHistory}
}

// Categorize derives the category from a row's error code and, for a dead
// letter, the handler's last error code (empty when none was recorded).
func Categorize(errorClass, errorCode, lastErrorCode string) Category {
	code := errorCode
	if errorClass == "dlq" {
		if lastErrorCode == "" {
			// The handler never said why: nothing but a dependency keeps a
			// message failing without a classified error for all its
			// attempts (a function that was down or timed out).
			return Dependency
		}
		code = lastErrorCode
	}
	switch {
	case code == "envelope.unsupported_schema", code == "event.type_not_handled", code == "inbox.payload_mismatch":
		return CodeDefect
	case strings.HasPrefix(code, "security."), strings.HasSuffix(code, ".identity_mismatch"),
		code == "http.401", code == "http.403", code == "envelope.tenant_missing":
		return Permission
	case strings.HasSuffix(code, ".not_found"), strings.HasSuffix(code, ".wrong_task"), strings.HasSuffix(code, "_missing"),
		code == "billing.no_reservation", code == "render.no_chunk":
		return DirtyHistory
	case code == "not_cloudevent", strings.HasPrefix(code, "envelope."), strings.HasPrefix(code, "payload."),
		strings.HasSuffix(code, ".bad_key"), strings.HasSuffix(code, ".malformed"):
		return DataDefect
	case strings.HasPrefix(code, "provider."), strings.HasPrefix(code, "media."), strings.HasPrefix(code, "deliver."),
		strings.HasPrefix(code, "http.5"), strings.HasSuffix(code, ".contended"), strings.HasSuffix(code, "_busy"),
		code == "inbox.row_vanished", code == "timeout":
		return Dependency
	}
	return CodeDefect
}

// maxSnapshot bounds a payload snapshot as stored (the column's CHECK is
// 16 KiB; a snapshot's JSON encoding can grow a little from escaping).
const maxSnapshot = 8 << 10

// redacted replaces what a snapshot must not show.
const redacted = "[redacted]"

// secretKey matches the names of JSON fields whose values are secrets.
var secretKey = regexp.MustCompile(`(?i)(secret|token|passw|authori[sz]ation|api[_-]?key|signature|credential|cookie|private[_-]?key|session)`)

// secretText matches a secret written as name=value or "name": "value" in
// a body that is not JSON.
var secretText = regexp.MustCompile(`(?i)((?:secret|token|passw\w*|authori[sz]ation|api[_-]?key|signature|credential|cookie)["']?\s*[:=]\s*["']?)[^\s"',&;}]+`)

// signedQuery matches the query of a URL that carries its own credentials
// (a presigned S3 URL, a provider's signed download link).
var signedQuery = regexp.MustCompile(`(?i)(https?://[^\s"?]+)\?[^\s"]*(?:signature|sig=|token|x-amz-credential|expires)[^\s"]*`)

// Snapshot is body made fit to show a person: a JSON body with the values
// of secret-looking fields and the queries of signed URLs replaced, at most
// 8 KiB; a longer one or one that is not JSON is given as the (redacted)
// text of its start. The body itself is kept whole beside it, for replay.
func Snapshot(body []byte) json.RawMessage {
	var v any
	if json.Valid(body) && json.Unmarshal(body, &v) == nil {
		out, err := json.Marshal(redact(v))
		if err == nil && len(out) <= maxSnapshot {
			return out
		}
		if err == nil {
			return textSnapshot(out, len(body), true)
		}
	}
	return textSnapshot(body, len(body), false)
}

// textSnapshot is the start of b, redacted, as a JSON object saying how
// long the body was.
func textSnapshot(b []byte, size int, isJSON bool) json.RawMessage {
	s := struct {
		Truncated bool   `json:"truncated"`
		JSON      bool   `json:"json"`
		SizeBytes int    `json:"size_bytes"`
		Text      string `json:"text,omitempty"`
		Binary    bool   `json:"binary,omitempty"`
	}{JSON: isJSON, SizeBytes: size}
	head := b
	if len(head) > maxSnapshot/2 {
		head, s.Truncated = head[:maxSnapshot/2], true
		// The cut may have split a rune.
		for i := 0; i < utf8.UTFMax && len(head) > 0 && !utf8.Valid(head); i++ {
			head = head[:len(head)-1]
		}
	}
	if !utf8.Valid(head) || bytes.IndexByte(head, 0) >= 0 {
		s.Binary = true
	} else {
		s.Text = redactText(string(head))
	}
	out, _ := json.Marshal(s) // only strings, ints and bools
	return out
}

// redact returns v with secret fields and signed URLs replaced.
func redact(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if secretKey.MatchString(k) {
				if x != nil {
					t[k] = redacted
				}
				continue
			}
			t[k] = redact(x)
		}
	case []any:
		for i, x := range t {
			t[i] = redact(x)
		}
	case string:
		return redactText(t)
	}
	return v
}

func redactText(s string) string {
	s = signedQuery.ReplaceAllString(s, "$1?"+redacted)
	return secretText.ReplaceAllString(s, "${1}"+redacted)
}
