package envelope

import (
	"fmt"
	"hash/fnv"
	"mime"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
)

// CloudEvents extension attributes that carry the envelope fields which have
// no core attribute (docs/design.md §2).
const (
	ExtTenantID      = "tenantid"
	ExtAggregateType = "aggregatetype"
	ExtSchemaVersion = "schemaversion" // an integer
	ExtCorrelationID = "correlationid"
	ExtCausationID   = "causationid"
	ExtTraceParent   = "traceparent" // W3C, distributed-tracing extension
	ExtTraceState    = "tracestate"  // W3C, distributed-tracing extension
)

// ceAttribute names, for errors raised while reading a CloudEvent, the
// attribute the sender actually set instead of the envelope field.
var ceAttribute = map[string]string{
	"event_id":       "id",
	"event_type":     "type",
	"producer":       "source",
	"occurred_at":    "time",
	"aggregate_id":   "subject",
	"payload":        "data",
	"aggregate_type": ExtAggregateType,
	"schema_version": ExtSchemaVersion,
	"tenant_id":      ExtTenantID,
	"trace_id":       ExtTraceParent,
	"traceparent":    ExtTraceParent,
	"tracestate":     ExtTraceState,
	"correlation_id": ExtCorrelationID,
	"causation_id":   ExtCausationID,
}

// ToCloudEvent maps e onto a CloudEvents v1.0 event: id=event_id,
// type=event_type, source=[Envelope.Source], time=occurred_at,
// subject=aggregate_id, datacontenttype=application/json, data=payload, and
// the Ext* extensions. traceparent is TraceParent, or, when that is empty,
// "00-<trace_id>-<span>-01" with a span id derived from the event id, so the
// same envelope always maps to the same event; tracestate is TraceState. It
// validates e first.
func (e Envelope) ToCloudEvent() (event.Event, error) {
	if err := e.Validate(); err != nil {
		return event.Event{}, err
	}
	ev := event.New(event.CloudEventsVersionV1)
	ev.SetID(e.EventID)
	ev.SetType(e.EventType)
	ev.SetSource(e.Source())
	ev.SetTime(e.OccurredAt)
	ev.SetSubject(e.AggregateID)
	ev.SetDataContentType(event.ApplicationJSON)
	// Set directly: SetData would mark bytes for base64 in structured mode.
	ev.DataEncoded = compactPayload(e.Payload)
	ev.DataBase64 = false
	ev.SetExtension(ExtTenantID, e.TenantID)
	ev.SetExtension(ExtAggregateType, e.AggregateType)
	ev.SetExtension(ExtSchemaVersion, int32(e.SchemaVersion))
	if e.CorrelationID != "" {
		ev.SetExtension(ExtCorrelationID, e.CorrelationID)
	}
	if e.CausationID != "" {
		ev.SetExtension(ExtCausationID, e.CausationID)
	}
	if tp := e.W3CTraceParent(); tp != "" {
		ev.SetExtension(ExtTraceParent, tp)
	}
	if e.TraceState != "" {
		ev.SetExtension(ExtTraceState, e.TraceState)
	}
	if err := ev.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("envelope: build cloudevent %s: %w", e.EventID, err)
	}
	return ev, nil
}

// FromCloudEvent reads an envelope out of a CloudEvent made by
// [Envelope.ToCloudEvent] or by any sender that follows the same mapping, in
// binary or structured mode. It refuses a specversion other than 1.0, a
// schemaversion this build does not read (checked before every other
// attribute, so that a newer schema is always [ClassUnsupportedSchema]), a
// source outside [SourcePrefix], a datacontenttype other than
// application/json, a missing tenantid, aggregatetype or schemaversion, and a
// malformed traceparent; then it validates the envelope. Every error it
// returns is a [*ValidationError] whose Field names the CloudEvents
// attribute. Extensions it does not know are ignored.
func FromCloudEvent(ev event.Event) (Envelope, error) {
	if ev.Context == nil {
		return Envelope{}, invalid(ClassMalformed, "", "cloudevent has no context")
	}
	if sv := ev.SpecVersion(); sv != event.CloudEventsVersionV1 {
		return Envelope{}, invalid(ClassBadAttribute, "specversion", "%s is not supported (supported: 1.0)", quote(sv))
	}
	// A schema version this build does not read is reported before any
	// other attribute is looked at, as Parse does for JSON: a newer schema
	// may rename or drop the attributes checked below, and the quarantine
	// must then say "unsupported_schema" (upgrade the consumer, replay),
	// not "missing_field" or "tenant_missing" (a broken producer).
	if v, ok := ev.Extensions()[ExtSchemaVersion]; ok {
		if n, err := types.ToInteger(v); err == nil && n != 0 && !Readable(int(n)) {
			return Envelope{}, invalid(ClassUnsupportedSchema, ExtSchemaVersion, "%d is not supported (supported: %s)", n, supportedVersions(OldestReadSchemaVersion, NewestReadSchemaVersion))
		}
	}
	producer, ok := strings.CutPrefix(ev.Source(), SourcePrefix)
	if !ok {
		return Envelope{}, invalid(ClassBadAttribute, "source", "%s does not start with %q", quote(ev.Source()), SourcePrefix)
	}
	if ct := ev.DataContentType(); !isJSONMediaType(ct) {
		return Envelope{}, invalid(ClassBadAttribute, "datacontenttype", "%s is not %s", quote(ct), event.ApplicationJSON)
	}
	exts := ev.Extensions()
	tenantID, err := stringExtension(exts, ExtTenantID, ClassTenantMissing)
	if err != nil {
		return Envelope{}, err
	}
	aggregateType, err := stringExtension(exts, ExtAggregateType, ClassMissingField)
	if err != nil {
		return Envelope{}, err
	}
	schemaVersion, err := integerExtension(exts, ExtSchemaVersion)
	if err != nil {
		return Envelope{}, err
	}
	correlationID, err := stringExtension(exts, ExtCorrelationID, "")
	if err != nil {
		return Envelope{}, err
	}
	causationID, err := stringExtension(exts, ExtCausationID, "")
	if err != nil {
		return Envelope{}, err
	}
	traceParent, err := stringExtension(exts, ExtTraceParent, "")
	if err != nil {
		return Envelope{}, err
	}
	var traceID string
	if traceParent != "" {
		if traceID, ok = parseTraceParent(traceParent); !ok {
			return Envelope{}, invalid(ClassBadAttribute, ExtTraceParent, "%s is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)", quote(traceParent))
		}
		// A later version's extra fields are not ours to carry on: a
		// receiver continues the trace as version 00 (W3C Trace Context).
		traceParent = "00" + traceParent[2:55]
		if traceParent == derivedTraceParent(traceID, ev.ID()) {
			traceParent = "" // what ToCloudEvent writes for an envelope without one
		}
	}
	traceState, err := stringExtension(exts, ExtTraceState, "")
	if err != nil {
		return Envelope{}, err
	}
	if traceParent == "" {
		traceState = "" // a tracestate means nothing without its own parent
	}
	e := Envelope{
		EventID:       ev.ID(),
		EventType:     ev.Type(),
		SchemaVersion: schemaVersion,
		Producer:      producer,
		OccurredAt:    ev.Time().UTC(),
		AggregateType: aggregateType,
		AggregateID:   ev.Subject(),
		TenantID:      tenantID,
		TraceID:       traceID,
		CorrelationID: correlationID,
		CausationID:   causationID,
		Payload:       compactPayload(ev.Data()),
		TraceParent:   traceParent,
		TraceState:    traceState,
	}
	if err := e.Validate(); err != nil {
		if verr, ok := err.(*ValidationError); ok && ceAttribute[verr.Field] != "" {
			verr.Field = ceAttribute[verr.Field]
		}
		return Envelope{}, err
	}
	if err := ev.Validate(); err != nil {
		return Envelope{}, invalid(ClassMalformed, "", "cloudevent: %v", err)
	}
	return e, nil
}

// stringExtension returns a string extension, "" when absent. When missing
// is not empty the extension is required and its absence has that class.
func stringExtension(exts map[string]any, name string, missing Class) (string, error) {
	v, ok := exts[name]
	if !ok {
		if missing != "" {
			return "", invalid(missing, name, "extension is required")
		}
		return "", nil
	}
	s, err := types.ToString(v)
	if err != nil {
		return "", invalid(ClassBadAttribute, name, "must be a string, got %T", v)
	}
	if s == "" && missing != "" {
		return "", invalid(missing, name, "extension is required")
	}
	return s, nil
}

func integerExtension(exts map[string]any, name string) (int, error) {
	v, ok := exts[name]
	if !ok {
		return 0, invalid(ClassMissingField, name, "extension is required")
	}
	n, err := types.ToInteger(v)
	if err != nil {
		return 0, invalid(ClassBadAttribute, name, "must be an integer: %v", err)
	}
	return int(n), nil
}

func isJSONMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == event.ApplicationJSON
}

// spanID derives a stable, non-zero 16-hex-digit span id from the event id:
// the event is the span the producer's transaction emitted.
func spanID(eventID string) string {
	h := fnv.New64a()
	h.Write([]byte(eventID))
	sum := h.Sum64()
	if sum == 0 {
		sum = 1
	}
	return fmt.Sprintf("%016x", sum)
}

// W3CTraceParent is the traceparent the event carries: TraceParent, or
// the one derived from the event id; empty without a trace id.
func (e Envelope) W3CTraceParent() string {
	switch {
	case e.TraceParent != "":
		return e.TraceParent
	case e.TraceID != "":
		return derivedTraceParent(e.TraceID, e.EventID)
	}
	return ""
}

// derivedTraceParent is the traceparent of an event whose producer ran no
// tracer: its span id is a hash of the event id.
func derivedTraceParent(traceID, eventID string) string {
	return "00-" + traceID + "-" + spanID(eventID) + "-01"
}

// parseTraceParent returns the trace id of a W3C traceparent
// "<version>-<trace id>-<parent id>-<flags>". Version 00 must be exactly that;
// later versions may append fields, as the W3C spec allows; version ff is
// invalid.
func parseTraceParent(s string) (string, bool) {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return "", false
	}
	version, traceID, parentID, flags := s[0:2], s[3:35], s[36:52], s[53:55]
	switch {
	case !isLowerHex(version) || version == "ff":
		return "", false
	case version == "00" && len(s) != 55:
		return "", false
	case len(s) > 55 && s[55] != '-':
		return "", false
	case !isTraceID(traceID) || !isLowerHex(parentID) || strings.Trim(parentID, "0") == "" || !isLowerHex(flags):
		return "", false
	}
	return traceID, true
}
