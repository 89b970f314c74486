package envelope

import (
	"encoding/json"
	"strings"

	"github.com/google/uuid"
)

// Length limits. Identifiers travel as CloudEvents HTTP headers and broker
// message properties, so they stay short.
const (
	maxEventTypeLen     = 128
	maxNameLen          = 64 // producer, aggregate_type
	maxIdentifierLength = 256
)

// Validate reports the first rule e breaks as a [*ValidationError], or nil.
// The rules, in the order they are checked:
//
//   - schema_version is one this build reads, see [Readable] (else
//     [ClassUnsupportedSchema]);
//   - event_id is a UUID of any version in lower-case canonical form, not
//     the nil UUID ([ClassBadID]);
//   - event_type is a lower-case dotted name ([a-z0-9_] segments joined by
//     '.'), at most 128 bytes; producer is [a-z0-9-]+ and aggregate_type
//     [a-z0-9_.-]+, at most 64 bytes each ([ClassBadAttribute]);
//   - occurred_at is set and falls in years 1 to 9999 UTC;
//   - aggregate_id, tenant_id and, when set, correlation_id and causation_id
//     are 1 to 256 printable ASCII characters other than space, '"' and '%',
//     which every CloudEvents binding carries unescaped ([ClassBadID]);
//   - trace_id, when set, is 32 lower-case hex digits, not all zero;
//   - traceparent, when set, is a W3C traceparent of trace_id, which it
//     requires; tracestate, when set, needs traceparent and is at most 512
//     printable ASCII characters;
//   - payload is a JSON object of at most [MaxPayloadBytes].
//
// A missing required field is [ClassMissingField], except tenant_id, which
// is [ClassTenantMissing].
func (e Envelope) Validate() error {
	switch {
	case e.SchemaVersion == 0:
		return invalid(ClassMissingField, "schema_version", "is required (supported: %s)", supportedVersions(OldestReadSchemaVersion, NewestReadSchemaVersion))
	case !Readable(e.SchemaVersion):
		return invalid(ClassUnsupportedSchema, "schema_version", "%d is not supported (supported: %s)", e.SchemaVersion, supportedVersions(OldestReadSchemaVersion, NewestReadSchemaVersion))
	}
	switch {
	case e.EventID == "":
		return invalid(ClassMissingField, "event_id", "is required")
	case !isEventID(e.EventID):
		return invalid(ClassBadID, "event_id", "%s is not a lower-case canonical UUID such as \"01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f\"", quote(e.EventID))
	}
	switch {
	case e.EventType == "":
		return invalid(ClassMissingField, "event_type", "is required")
	case len(e.EventType) > maxEventTypeLen || !isDottedName(e.EventType):
		return invalid(ClassBadAttribute, "event_type", "%s is not a lower-case dotted name of at most %d bytes such as \"generation.submit.requested\"", quote(e.EventType), maxEventTypeLen)
	}
	switch {
	case e.Producer == "":
		return invalid(ClassMissingField, "producer", "is required")
	case len(e.Producer) > maxNameLen || !isName(e.Producer, "-"):
		return invalid(ClassBadAttribute, "producer", "%s is not a name of at most %d characters from [a-z0-9-]", quote(e.Producer), maxNameLen)
	}
	switch {
	case e.OccurredAt.IsZero():
		return invalid(ClassMissingField, "occurred_at", "is required")
	case e.OccurredAt.UTC().Year() < 1 || e.OccurredAt.UTC().Year() > 9999:
		return invalid(ClassBadAttribute, "occurred_at", "year %d is outside 1-9999", e.OccurredAt.UTC().Year())
	}
	switch {
	case e.AggregateType == "":
		return invalid(ClassMissingField, "aggregate_type", "is required")
	case len(e.AggregateType) > maxNameLen || !isName(e.AggregateType, "_.-"):
		return invalid(ClassBadAttribute, "aggregate_type", "%s is not a name of at most %d characters from [a-z0-9_.-]", quote(e.AggregateType), maxNameLen)
	}
	if e.AggregateID == "" {
		return invalid(ClassMissingField, "aggregate_id", "is required")
	}
	if e.TenantID == "" {
		return invalid(ClassTenantMissing, "tenant_id", "is required")
	}
	for _, id := range []struct{ field, value string }{
		{"aggregate_id", e.AggregateID},
		{"tenant_id", e.TenantID},
		{"correlation_id", e.CorrelationID},
		{"causation_id", e.CausationID},
	} {
		if id.value != "" && !isIdentifier(id.value) {
			return invalid(ClassBadID, id.field, "%s is not 1-%d printable ASCII characters without space, '\"' or '%%'", quote(id.value), maxIdentifierLength)
		}
	}
	if e.TraceID != "" && !isTraceID(e.TraceID) {
		return invalid(ClassBadAttribute, "trace_id", "%s is not a W3C trace id (32 lower-case hex digits, not all zero)", quote(e.TraceID))
	}
	if err := e.validateTraceContext(); err != nil {
		return err
	}
	return validatePayload(e.Payload)
}

func validatePayload(p json.RawMessage) error {
	switch {
	case len(p) == 0:
		return invalid(ClassMissingField, "payload", "is required (a JSON object)")
	case len(p) > MaxPayloadBytes:
		return invalid(ClassPayloadTooLarge, "payload", "%d bytes exceeds the limit of %d; carry ids and object-storage references, not content", len(p), MaxPayloadBytes)
	case !json.Valid(p):
		return invalid(ClassMalformed, "payload", "is not valid JSON")
	}
	if first, _ := firstByte(p); first != '{' {
		return invalid(ClassBadAttribute, "payload", "must be a JSON object, got %s", jsonKind(first))
	}
	return nil
}

func jsonKind(first byte) string {
	switch first {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

func isEventID(s string) bool {
	if len(s) != 36 {
		return false
	}
	u, err := uuid.Parse(s)
	return err == nil && u != uuid.Nil && u.String() == s
}

// isDottedName reports whether s is [a-z0-9_]+ segments joined by single dots.
func isDottedName(s string) bool {
	for seg := range strings.SplitSeq(s, ".") {
		if !isName(seg, "_") {
			return false
		}
	}
	return true
}

// isName reports whether s is non-empty and made of [a-z0-9] and extra.
func isName(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

func isIdentifier(s string) bool {
	if s == "" || len(s) > maxIdentifierLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x21 || c > 0x7e || c == '"' || c == '%' {
			return false
		}
	}
	return true
}

func isTraceID(s string) bool {
	return len(s) == 32 && isLowerHex(s) && strings.Trim(s, "0") != ""
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// validateTraceContext checks TraceParent and TraceState against TraceID.
func (e Envelope) validateTraceContext() error {
	if e.TraceParent != "" {
		traceID, ok := parseTraceParent(e.TraceParent)
		switch {
		case !ok:
			return invalid(ClassBadAttribute, "traceparent", "%s is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)", quote(e.TraceParent))
		case traceID != e.TraceID:
			return invalid(ClassBadAttribute, "traceparent", "%s belongs to trace %s, not to the event's trace_id %s", quote(e.TraceParent), traceID, quote(e.TraceID))
		}
	}
	if e.TraceState != "" {
		switch {
		case e.TraceParent == "":
			return invalid(ClassBadAttribute, "tracestate", "is set without a traceparent")
		case len(e.TraceState) > maxTraceStateLen || !isPrintableASCII(e.TraceState):
			return invalid(ClassBadAttribute, "tracestate", "is not at most %d printable ASCII characters", maxTraceStateLen)
		}
	}
	return nil
}

// maxTraceStateLen is the W3C limit a vendor may rely on.
const maxTraceStateLen = 512

func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
