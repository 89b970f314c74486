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

// Categorize derives the category from a row's error class and code and,
// for a dead letter, the handler's last error code (empty when none was
// recorded).
func Categorize(errorClass, errorCode, lastErrorCode string) Category {
	if errorClass == "dlq" {
		return categorizeRetried(lastErrorCode)
	}
	return categorizeRefused(errorCode)
}

// categorizeRetried is a dead letter's category: its handler's errors were
// retryable (that is why it was retried until the broker gave up), so they
// name a dependency, unless nobody classified them or they name history.
func categorizeRetried(last string) Category {
	switch {
	case last == "":
		// The handler never said why: nothing but a dependency keeps a
		// message failing for all its attempts without an answer (a
		// function that was down or timed out each time).
		return Dependency
	case last == "unclassified", last == "http.500":
		return CodeDefect // an error nobody classified, or a handler that failed outright
	case isHistory(last):
		return DirtyHistory
	}
	return Dependency
}

// categorizeRefused is the category of a message a stage refused for good.
func categorizeRefused(code string) Category {
	switch {
	case code == "envelope.unsupported_schema", code == "event.type_not_handled", code == "inbox.payload_mismatch",
		code == "render.spec_conflict", code == "unclassified":
		return CodeDefect
	case strings.HasPrefix(code, "security."), strings.HasSuffix(code, ".identity_mismatch"), code == "tenant.mismatch",
		code == "http.401", code == "http.403", code == "envelope.tenant_missing":
		return Permission
	case isHistory(code):
		return DirtyHistory
	case code == "not_cloudevent", strings.HasPrefix(code, "envelope."), strings.HasPrefix(code, "payload."),
		strings.HasSuffix(code, ".bad_key"), strings.HasSuffix(code, ".malformed"),
		// A provider or media error a stage refuses for good is about
		// this message's input or output, not a dependency to wait for.
		strings.HasPrefix(code, "provider."), strings.HasPrefix(code, "media."), strings.HasPrefix(code, "http.4"):
		return DataDefect
	}
	return CodeDefect
}

// isHistory: the code names something that no longer exists or matches.
func isHistory(code string) bool {
	return strings.HasSuffix(code, ".not_found") || strings.HasSuffix(code, ".wrong_task") || strings.HasSuffix(code, "_missing") ||
		code == "billing.no_reservation" || code == "render.no_chunk"
}

// maxSnapshot bounds a payload snapshot as stored (the column's CHECK is
// 16 KiB; a snapshot's JSON encoding can grow a little from escaping).
const maxSnapshot = 8 << 10

// redacted replaces what a snapshot must not show.
const redacted = "[redacted]"

// secretKey matches the names of JSON fields whose values are secrets.
var secretKey = regexp.MustCompile(`(?i)(secret|token|passw|pass$|_pass\b|authori[sz]ation|^auth$|api[_-]?key|access[_-]?key|` +
	`signature|credential|cookie|private[_-]?key|session|jwt|dsn)`)

// secretText matches a secret written as name=value or "name": "value" in
// a body that is not JSON or in an error's text.
var secretText = regexp.MustCompile(`(?i)((?:secret|token|passw\w*|authori[sz]ation|api[_-]?key|access[_-]?key|signature|credential|cookie|jwt)` +
	`["']?\s*[:=]\s*["']?)[^\s"',&;}]+`)

// credentialText matches credentials that carry no name: a bearer or basic
// token, a JWT, the password in a URL's user info.
var credentialText = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+`), "$1 " + redacted},
	{regexp.MustCompile(`eyJ[\w-]+\.[\w-]+\.[\w-]+`), redacted},
	{regexp.MustCompile(`(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@`), "${1}" + redacted + "@"},
}

// signedQuery matches the query of a URL that carries its own credentials
// (a presigned S3 URL, a provider's signed download link).
var signedQuery = regexp.MustCompile(`(?i)(https?://[^\s"?]+)\?[^\s"]*(?:signature|sig=|token|x-amz-credential|expires)[^\s"]*`)

// Snapshot is body made fit to show a person: a JSON body with the values
// of secret-looking fields and the queries of signed URLs replaced, at most
// 8 KiB; a longer one or one that is not JSON is given as the (redacted)
// text of its start. The body itself is kept whole beside it, for replay.
func Snapshot(body []byte) json.RawMessage {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // 9007199254740993 stays itself
	if json.Valid(body) && dec.Decode(&v) == nil {
		out, err := marshal(redact(v))
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
// long the body was; the start is cut until the object fits maxSnapshot
// (escaping can make text grow six times).
func textSnapshot(b []byte, size int, isJSON bool) json.RawMessage {
	s := struct {
		Truncated bool   `json:"truncated"`
		JSON      bool   `json:"json"`
		SizeBytes int    `json:"size_bytes"`
		Text      string `json:"text,omitempty"`
		Binary    bool   `json:"binary,omitempty"`
	}{JSON: isJSON, SizeBytes: size}
	if !utf8.Valid(trimCut(b[:min(len(b), maxSnapshot/2)])) || bytes.ContainsFunc(b, isBinaryRune) {
		s.Binary = true
		out, _ := json.Marshal(s) // only ints and bools
		return out
	}
	text := redactText(string(b))
	for limit := maxSnapshot / 2; ; limit /= 2 {
		s.Text, s.Truncated = text, false
		if len(text) > limit {
			s.Text, s.Truncated = string(trimCut([]byte(text[:limit]))), true
		}
		if out, _ := json.Marshal(s); len(out) <= maxSnapshot {
			return out
		}
	}
}

// trimCut drops a rune a cut split at the end of b.
func trimCut(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); i++ {
		b = b[:len(b)-1]
	}
	return b
}

// isBinaryRune is a control character a text body would not hold.
func isBinaryRune(r rune) bool {
	return r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == utf8.RuneError
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

// Redact replaces the secrets in a text, an error's message for example:
// named values, bearer and basic tokens, JWTs, passwords in URLs and the
// queries of signed URLs.
func Redact(s string) string { return redactText(s) }

func redactText(s string) string {
	s = signedQuery.ReplaceAllString(s, "$1?"+redacted)
	for _, c := range credentialText {
		s = c.re.ReplaceAllString(s, c.with)
	}
	return secretText.ReplaceAllString(s, "${1}"+redacted)
}

// marshal encodes v without escaping <, > and &: a snapshot is read by
// people, not embedded in HTML.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
