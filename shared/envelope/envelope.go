package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// The schema versions: the one this build writes, and the window of those it
// reads (see "Schema compatibility" in the package doc). Outside a
// dual-read window the three are equal.
const (
	// SchemaVersion is the envelope schema this build writes.
	SchemaVersion = 1
	// OldestReadSchemaVersion is the oldest schema this build reads.
	OldestReadSchemaVersion = 1
	// NewestReadSchemaVersion is the newest schema this build reads; it is
	// raised one release before SchemaVersion.
	NewestReadSchemaVersion = 1
)

// Readable reports whether this build reads schema version v.
func Readable(v int) bool { return inWindow(v, OldestReadSchemaVersion, NewestReadSchemaVersion) }

func inWindow(v, oldest, newest int) bool { return v >= oldest && v <= newest }

// supportedVersions names the read window for an error message: "1" or
// "1 to 2".
func supportedVersions(oldest, newest int) string {
	if oldest == newest {
		return strconv.Itoa(oldest)
	}
	return strconv.Itoa(oldest) + " to " + strconv.Itoa(newest)
}

// MaxPayloadBytes bounds the payload. A payload carries ids, versions and
// references, so anything near this size is a bug in the producer.
const MaxPayloadBytes = 64 << 10

// SourcePrefix starts every CloudEvents source; the producer follows it.
const SourcePrefix = "/aivedio/"

// Envelope is one event as stored in the outbox and carried by the broker
// (docs/design.md §2). Values returned by this package have a UTC OccurredAt and a
// payload in compact form, which is what makes every mapping round-trip
// unchanged.
type Envelope struct {
	EventID       string          `json:"event_id"`                 // UUID (v7 preferred), lower-case canonical form
	EventType     string          `json:"event_type"`               // e.g. "generation.submit.requested"
	SchemaVersion int             `json:"schema_version"`           // see [Readable]
	Producer      string          `json:"producer"`                 // e.g. "api", "submit"; CE source = "/aivedio/<producer>"
	OccurredAt    time.Time       `json:"occurred_at"`              // when the fact happened, UTC
	AggregateType string          `json:"aggregate_type"`           // e.g. "generation_task"
	AggregateID   string          `json:"aggregate_id"`             // the entity the event is about; CE subject
	TenantID      string          `json:"tenant_id"`                // owner of the aggregate
	TraceID       string          `json:"trace_id,omitempty"`       // 32 lower-case hex (W3C trace id)
	CorrelationID string          `json:"correlation_id,omitempty"` // shared by every event of one request
	CausationID   string          `json:"causation_id,omitempty"`   // usually the event_id that caused this one
	Payload       json.RawMessage `json:"payload"`                  // a JSON object, max 64 KiB

	// TraceParent is the W3C traceparent of the span that produced the
	// event, "00-<trace_id>-<span id>-<flags>": the parent of whoever
	// handles it. Empty means the one derived from the event id (see
	// [Envelope.ToCloudEvent]), for producers that run no tracer.
	TraceParent string `json:"traceparent,omitempty"`
	// TraceState is the W3C tracestate beside TraceParent; optional.
	TraceState string `json:"tracestate,omitempty"`
}

// NewParams are the inputs of [New]. EventID, SchemaVersion and OccurredAt
// are optional; the other required fields are those of [Envelope].
type NewParams struct {
	EventID       string    // a new UUIDv7 when empty
	EventType     string    //
	SchemaVersion int       // [SchemaVersion] when zero
	Producer      string    //
	OccurredAt    time.Time // now when zero
	AggregateType string    //
	AggregateID   string    //
	TenantID      string    //
	TraceID       string    // optional
	CorrelationID string    // optional
	CausationID   string    // optional
	Payload       any       // encoded with encoding/json; must encode to a JSON object
}

// New builds a validated envelope. OccurredAt is converted to UTC and
// truncated to microseconds so that it survives a PostgreSQL timestamptz
// unchanged. The event id is chosen here, once: whoever republishes the event
// later must reuse it, because consumers deduplicate on it.
func New(p NewParams) (Envelope, error) {
	e := Envelope{
		EventID:       p.EventID,
		EventType:     p.EventType,
		SchemaVersion: p.SchemaVersion,
		Producer:      p.Producer,
		OccurredAt:    p.OccurredAt,
		AggregateType: p.AggregateType,
		AggregateID:   p.AggregateID,
		TenantID:      p.TenantID,
		TraceID:       p.TraceID,
		CorrelationID: p.CorrelationID,
		CausationID:   p.CausationID,
	}
	if e.EventID == "" {
		id, err := uuid.NewV7()
		if err != nil {
			return Envelope{}, fmt.Errorf("envelope: generate event id: %w", err)
		}
		e.EventID = id.String()
	}
	if e.SchemaVersion == 0 {
		e.SchemaVersion = SchemaVersion
	}
	if e.OccurredAt.IsZero() {
		e.OccurredAt = time.Now()
	}
	e.OccurredAt = e.OccurredAt.UTC().Truncate(time.Microsecond)
	payload, err := json.Marshal(p.Payload)
	if err != nil {
		return Envelope{}, invalid(ClassMalformed, "payload", "cannot be encoded as JSON: %v", err)
	}
	e.Payload = payload
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// wireEnvelope reads occurred_at as a string so that a bad time is reported
// against its field; the outer field shadows the embedded one.
type wireEnvelope struct {
	Envelope
	OccurredAt string `json:"occurred_at"`
}

// Parse decodes and validates envelope JSON. A field it does not know is
// ignored (an additive field of a newer producer of the same schema
// version); trailing data is refused. Every error it returns is a
// [*ValidationError].
func Parse(data []byte) (Envelope, error) {
	if first, _ := firstByte(data); first != '{' {
		return Envelope{}, invalid(ClassMalformed, "", "input is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var w wireEnvelope
	err := dec.Decode(&w)
	if err == nil {
		if _, terr := dec.Token(); !errors.Is(terr, io.EOF) {
			err = errors.New("trailing data after the envelope")
		}
	}
	if err != nil {
		return Envelope{}, decodeError(data, err)
	}
	e := w.Envelope
	if w.OccurredAt != "" {
		t, err := time.Parse(time.RFC3339Nano, w.OccurredAt)
		if err != nil {
			return Envelope{}, invalid(ClassMalformed, "occurred_at", "%s is not an RFC 3339 time", quote(w.OccurredAt))
		}
		e.OccurredAt = t.UTC()
	}
	e.Payload = compactPayload(e.Payload)
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// decodeError classifies a JSON decoding failure. A newer schema may fail
// first on a field it retyped, so an unsupported schema_version is reported
// in preference to the decoding error.
func decodeError(data []byte, err error) error {
	var probe struct {
		SchemaVersion json.Number `json:"schema_version"`
	}
	if json.Unmarshal(data, &probe) == nil && probe.SchemaVersion != "" {
		if v, err := probe.SchemaVersion.Int64(); err != nil || !Readable(int(v)) {
			version := probe.SchemaVersion.String()
			if len(version) > 20 {
				version = version[:20] + "..."
			}
			return invalid(ClassUnsupportedSchema, "schema_version", "%s is not supported (supported: %s)", version, supportedVersions(OldestReadSchemaVersion, NewestReadSchemaVersion))
		}
	}
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntaxErr):
		return invalid(ClassMalformed, "", "invalid JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.As(err, &typeErr):
		want := "a string"
		if typeErr.Type != nil && typeErr.Type.Kind() == reflect.Int {
			want = "an integer"
		}
		return invalid(ClassMalformed, strings.TrimPrefix(typeErr.Field, "Envelope."), "must be %s, got JSON %s", want, typeErr.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalid(ClassMalformed, "", "truncated JSON")
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	return invalid(ClassMalformed, "", "%s", msg)
}

// Source is the CloudEvents source of the envelope: "/aivedio/<producer>".
func (e Envelope) Source() string { return SourcePrefix + e.Producer }

// compactPayload returns p in the form encoding/json writes it (compact,
// HTML-escaped), so that marshalling an Envelope and parsing it back yields
// the same bytes. Invalid JSON is returned unchanged for Validate to report.
func compactPayload(p json.RawMessage) json.RawMessage {
	if len(p) == 0 {
		return p
	}
	out, err := json.Marshal(p)
	if err != nil {
		return p
	}
	return out
}

// firstByte returns the first byte of data that is not JSON white space.
func firstByte(data []byte) (byte, bool) {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return c, true
	}
	return 0, false
}

// quote renders untrusted input for an error message, bounded so a hostile
// message cannot flood logs or the quarantine table.
func quote(s string) string {
	const limit = 64
	if len(s) > limit {
		return strconv.Quote(s[:limit]) + "..."
	}
	return strconv.Quote(s)
}
