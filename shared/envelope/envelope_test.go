package envelope_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
)

const (
	testEventID = "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f"
	testTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// validEnvelope has every field set, optional ones included.
func validEnvelope() envelope.Envelope {
	return envelope.Envelope{
		EventID:       testEventID,
		EventType:     "generation.submit.requested",
		SchemaVersion: 1,
		Producer:      "api",
		OccurredAt:    time.Date(2026, 11, 30, 12, 34, 56, 123456000, time.UTC),
		AggregateType: "generation_task",
		AggregateID:   "0193aa00-1111-7222-8333-444455556666",
		TenantID:      "tenant-42",
		TraceID:       testTraceID,
		CorrelationID: "req-7f3a",
		CausationID:   "01936d3c-0000-7000-8000-000000000001",
		Payload:       json.RawMessage(`{"task_id":"0193aa00-1111-7222-8333-444455556666","version":3}`),
	}
}

// envelopeJSON renders validEnvelope as a JSON object after edit changed its
// fields (set a key to nil to delete it).
func envelopeJSON(edit map[string]any) string {
	b, err := json.Marshal(validEnvelope())
	if err != nil {
		panic(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	for k, v := range edit {
		if v == nil {
			delete(m, k)
			continue
		}
		m[k] = v
	}
	if b, err = json.Marshal(m); err != nil {
		panic(err)
	}
	return string(b)
}

var bigPayload = payloadOfSize(envelope.MaxPayloadBytes + 100)

// payloadOfSize is a JSON object of exactly n bytes (n >= 8).
func payloadOfSize(n int) string {
	return `{"k":"` + strings.Repeat("x", n-8) + `"}`
}

// parseCases drive TestParse and seed FuzzParse. class "" means valid.
var parseCases = []struct {
	name  string
	data  string
	class envelope.Class
	field string
}{
	{"valid", envelopeJSON(nil), "", ""},
	{"valid without optional fields", envelopeJSON(map[string]any{"trace_id": nil, "correlation_id": nil, "causation_id": nil}), "", ""},
	{"valid with offset time", envelopeJSON(map[string]any{"occurred_at": "2026-11-30T13:34:56.5+01:00"}), "", ""},
	{"not json", `event_id=1`, envelope.ClassMalformed, ""},
	{"empty", ``, envelope.ClassMalformed, ""},
	{"null", `null`, envelope.ClassMalformed, ""},
	{"array", `[]`, envelope.ClassMalformed, ""},
	{"truncated", `{"event_id":"` + testEventID, envelope.ClassMalformed, ""},
	{"syntax error", `{"event_id" "x"}`, envelope.ClassMalformed, ""},
	{"trailing data", envelopeJSON(nil) + ` {}`, envelope.ClassMalformed, ""},
	{"additive field of the same schema", envelopeJSON(map[string]any{"priority": 1}), "", ""},
	{"schema_version string", envelopeJSON(map[string]any{"schema_version": "1"}), envelope.ClassMalformed, "schema_version"},
	{"occurred_at not a time", envelopeJSON(map[string]any{"occurred_at": "yesterday"}), envelope.ClassMalformed, "occurred_at"},
	{"occurred_at number", envelopeJSON(map[string]any{"occurred_at": 1700000000}), envelope.ClassMalformed, "occurred_at"},
	{"empty object", `{}`, envelope.ClassMissingField, "schema_version"},
	{"event_id missing", envelopeJSON(map[string]any{"event_id": nil}), envelope.ClassMissingField, "event_id"},
	{"occurred_at missing", envelopeJSON(map[string]any{"occurred_at": nil}), envelope.ClassMissingField, "occurred_at"},
	{"payload missing", envelopeJSON(map[string]any{"payload": nil}), envelope.ClassMissingField, "payload"},
	{"schema 2", envelopeJSON(map[string]any{"schema_version": 2}), envelope.ClassUnsupportedSchema, "schema_version"},
	{"schema 2 with new field", envelopeJSON(map[string]any{"schema_version": 2, "region": "eu"}), envelope.ClassUnsupportedSchema, "schema_version"},
	{"payload too large", envelopeJSON(map[string]any{"payload": json.RawMessage(bigPayload)}), envelope.ClassPayloadTooLarge, "payload"},
	{"event_id upper case", envelopeJSON(map[string]any{"event_id": strings.ToUpper(testEventID)}), envelope.ClassBadID, "event_id"},
	{"tenant missing", envelopeJSON(map[string]any{"tenant_id": nil}), envelope.ClassTenantMissing, "tenant_id"},
	{"payload array", envelopeJSON(map[string]any{"payload": []int{1}}), envelope.ClassBadAttribute, "payload"},
	{"payload null", envelopeJSON(map[string]any{"payload": json.RawMessage(`null`)}), envelope.ClassBadAttribute, "payload"},
	{"bad trace id", envelopeJSON(map[string]any{"trace_id": "xyz"}), envelope.ClassBadAttribute, "trace_id"},
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range parseCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := envelope.Parse([]byte(tc.data))
			if tc.class == "" {
				require.NoError(t, err)
				require.NoError(t, e.Validate())
				return
			}
			requireInvalid(t, err, tc.class, tc.field)
			require.Zero(t, e)
		})
	}
}

func TestParseNormalizes(t *testing.T) {
	t.Parallel()
	data := envelopeJSON(map[string]any{
		"occurred_at": "2026-11-30T13:34:56.123456789+01:00",
		"payload":     json.RawMessage("{ \"a\" : [1, 2],\n \"b\": \"<&>\" }"),
	})
	e, err := envelope.Parse([]byte(data))
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 11, 30, 12, 34, 56, 123456789, time.UTC), e.OccurredAt)
	require.Equal(t, `{"a":[1,2],"b":"\u003c\u0026\u003e"}`, string(e.Payload))

	b, err := json.Marshal(e)
	require.NoError(t, err)
	again, err := envelope.Parse(b)
	require.NoError(t, err)
	require.Equal(t, e, again)
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(e *envelope.Envelope)
		class envelope.Class
		field string
	}{
		{"valid", func(*envelope.Envelope) {}, "", ""},
		{"v4 event id", func(e *envelope.Envelope) { e.EventID = uuid.NewString() }, "", ""},
		{"payload at limit", func(e *envelope.Envelope) { e.Payload = json.RawMessage(payloadOfSize(envelope.MaxPayloadBytes)) }, "", ""},
		{"payload one over", func(e *envelope.Envelope) { e.Payload = json.RawMessage(payloadOfSize(envelope.MaxPayloadBytes + 1)) }, envelope.ClassPayloadTooLarge, "payload"},
		{"empty payload object", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{}`) }, "", ""},
		{"schema missing", func(e *envelope.Envelope) { e.SchemaVersion = 0 }, envelope.ClassMissingField, "schema_version"},
		{"schema 7", func(e *envelope.Envelope) { e.SchemaVersion = 7 }, envelope.ClassUnsupportedSchema, "schema_version"},
		{"event_id missing", func(e *envelope.Envelope) { e.EventID = "" }, envelope.ClassMissingField, "event_id"},
		{"event_id urn", func(e *envelope.Envelope) { e.EventID = "urn:uuid:" + testEventID }, envelope.ClassBadID, "event_id"},
		{"event_id braces", func(e *envelope.Envelope) { e.EventID = "{" + testEventID + "}" }, envelope.ClassBadID, "event_id"},
		{"event_id no hyphens", func(e *envelope.Envelope) { e.EventID = strings.ReplaceAll(testEventID, "-", "") }, envelope.ClassBadID, "event_id"},
		{"event_id nil uuid", func(e *envelope.Envelope) { e.EventID = uuid.Nil.String() }, envelope.ClassBadID, "event_id"},
		{"event_id garbage", func(e *envelope.Envelope) { e.EventID = "task-1" }, envelope.ClassBadID, "event_id"},
		{"event_type missing", func(e *envelope.Envelope) { e.EventType = "" }, envelope.ClassMissingField, "event_type"},
		{"event_type upper", func(e *envelope.Envelope) { e.EventType = "Generation.Submit" }, envelope.ClassBadAttribute, "event_type"},
		{"event_type empty segment", func(e *envelope.Envelope) { e.EventType = "generation..submit" }, envelope.ClassBadAttribute, "event_type"},
		{"event_type trailing dot", func(e *envelope.Envelope) { e.EventType = "generation." }, envelope.ClassBadAttribute, "event_type"},
		{"event_type too long", func(e *envelope.Envelope) { e.EventType = strings.Repeat("a", 129) }, envelope.ClassBadAttribute, "event_type"},
		{"producer missing", func(e *envelope.Envelope) { e.Producer = "" }, envelope.ClassMissingField, "producer"},
		{"producer slash", func(e *envelope.Envelope) { e.Producer = "api/v2" }, envelope.ClassBadAttribute, "producer"},
		{"occurred_at missing", func(e *envelope.Envelope) { e.OccurredAt = time.Time{} }, envelope.ClassMissingField, "occurred_at"},
		{"occurred_at year 0", func(e *envelope.Envelope) { e.OccurredAt = time.Date(0, 6, 1, 0, 0, 0, 0, time.UTC) }, envelope.ClassBadAttribute, "occurred_at"},
		{"occurred_at year 10000", func(e *envelope.Envelope) { e.OccurredAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, envelope.ClassBadAttribute, "occurred_at"},
		{"aggregate_type missing", func(e *envelope.Envelope) { e.AggregateType = "" }, envelope.ClassMissingField, "aggregate_type"},
		{"aggregate_type space", func(e *envelope.Envelope) { e.AggregateType = "generation task" }, envelope.ClassBadAttribute, "aggregate_type"},
		{"aggregate_id missing", func(e *envelope.Envelope) { e.AggregateID = "" }, envelope.ClassMissingField, "aggregate_id"},
		{"aggregate_id space", func(e *envelope.Envelope) { e.AggregateID = "task 1" }, envelope.ClassBadID, "aggregate_id"},
		{"aggregate_id percent", func(e *envelope.Envelope) { e.AggregateID = "task%201" }, envelope.ClassBadID, "aggregate_id"},
		{"aggregate_id too long", func(e *envelope.Envelope) { e.AggregateID = strings.Repeat("a", 257) }, envelope.ClassBadID, "aggregate_id"},
		{"tenant missing", func(e *envelope.Envelope) { e.TenantID = "" }, envelope.ClassTenantMissing, "tenant_id"},
		{"tenant non-ascii", func(e *envelope.Envelope) { e.TenantID = "ténant" }, envelope.ClassBadID, "tenant_id"},
		{"correlation_id quote", func(e *envelope.Envelope) { e.CorrelationID = `a"b` }, envelope.ClassBadID, "correlation_id"},
		{"causation_id newline", func(e *envelope.Envelope) { e.CausationID = "a\nb" }, envelope.ClassBadID, "causation_id"},
		{"trace_id upper", func(e *envelope.Envelope) { e.TraceID = strings.ToUpper(testTraceID) }, envelope.ClassBadAttribute, "trace_id"},
		{"trace_id zero", func(e *envelope.Envelope) { e.TraceID = strings.Repeat("0", 32) }, envelope.ClassBadAttribute, "trace_id"},
		{"trace_id short", func(e *envelope.Envelope) { e.TraceID = testTraceID[1:] }, envelope.ClassBadAttribute, "trace_id"},
		{"payload missing", func(e *envelope.Envelope) { e.Payload = nil }, envelope.ClassMissingField, "payload"},
		{"payload too large", func(e *envelope.Envelope) { e.Payload = json.RawMessage(bigPayload) }, envelope.ClassPayloadTooLarge, "payload"},
		{"payload invalid json", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`{"a":`) }, envelope.ClassMalformed, "payload"},
		{"payload string", func(e *envelope.Envelope) { e.Payload = json.RawMessage(`"x"`) }, envelope.ClassBadAttribute, "payload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := validEnvelope()
			tc.edit(&e)
			err := e.Validate()
			if tc.class == "" {
				require.NoError(t, err)
				return
			}
			requireInvalid(t, err, tc.class, tc.field)
		})
	}
}

func TestNew(t *testing.T) {
	t.Parallel()
	params := envelope.NewParams{
		EventType:     "generation.submit.requested",
		Producer:      "api",
		AggregateType: "generation_task",
		AggregateID:   "task-1",
		TenantID:      "tenant-1",
		Payload:       map[string]any{"task_id": "task-1", "version": 1},
	}

	t.Run("fills id, time and schema", func(t *testing.T) {
		t.Parallel()
		before := time.Now()
		e, err := envelope.New(params)
		require.NoError(t, err)
		id, err := uuid.Parse(e.EventID)
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), id.Version())
		require.Equal(t, 1, e.SchemaVersion)
		require.Equal(t, time.UTC, e.OccurredAt.Location())
		require.Zero(t, e.OccurredAt.Nanosecond()%1000, "truncated to microseconds")
		require.WithinDuration(t, before, e.OccurredAt, time.Minute)
		require.JSONEq(t, `{"task_id":"task-1","version":1}`, string(e.Payload))
	})

	t.Run("keeps what it is given", func(t *testing.T) {
		t.Parallel()
		p := params
		p.EventID = testEventID
		p.OccurredAt = time.Date(2026, 1, 2, 3, 4, 5, 6789123, time.FixedZone("x", 3600))
		p.Payload = json.RawMessage(`{ "a": 1 }`)
		e, err := envelope.New(p)
		require.NoError(t, err)
		require.Equal(t, testEventID, e.EventID)
		require.Equal(t, time.Date(2026, 1, 2, 2, 4, 5, 6789000, time.UTC), e.OccurredAt)
		require.Equal(t, `{"a":1}`, string(e.Payload))
	})

	for name, tc := range map[string]struct {
		edit  func(p *envelope.NewParams)
		class envelope.Class
		field string
	}{
		"no tenant":          {func(p *envelope.NewParams) { p.TenantID = "" }, envelope.ClassTenantMissing, "tenant_id"},
		"nil payload":        {func(p *envelope.NewParams) { p.Payload = nil }, envelope.ClassBadAttribute, "payload"},
		"unencodable":        {func(p *envelope.NewParams) { p.Payload = map[string]any{"c": make(chan int)} }, envelope.ClassMalformed, "payload"},
		"unsupported schema": {func(p *envelope.NewParams) { p.SchemaVersion = 2 }, envelope.ClassUnsupportedSchema, "schema_version"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := params
			tc.edit(&p)
			_, err := envelope.New(p)
			requireInvalid(t, err, tc.class, tc.field)
		})
	}
}

func TestValidationError(t *testing.T) {
	t.Parallel()
	e := validEnvelope()
	e.SchemaVersion = 7
	err := e.Validate()
	require.EqualError(t, err, "envelope: schema_version: 7 is not supported (supported: 1)")

	wrapped := fmt.Errorf("handle message: %w", err)
	require.ErrorIs(t, wrapped, envelope.ErrInvalid)
	class, ok := envelope.ClassOf(wrapped)
	require.True(t, ok)
	require.Equal(t, envelope.ClassUnsupportedSchema, class)

	_, ok = envelope.ClassOf(errors.New("connection refused"))
	require.False(t, ok)
	_, ok = envelope.ClassOf(nil)
	require.False(t, ok)
	require.NotErrorIs(t, errors.New("invalid envelope"), envelope.ErrInvalid)

	whole := &envelope.ValidationError{Class: envelope.ClassMalformed, Reason: "input is not a JSON object"}
	require.EqualError(t, whole, "envelope: input is not a JSON object")
}

func TestSource(t *testing.T) {
	t.Parallel()
	require.Equal(t, "/aivedio/api", validEnvelope().Source())
}

// requireInvalid checks err is a ValidationError of class on field.
func requireInvalid(t *testing.T, err error, class envelope.Class, field string) {
	t.Helper()
	require.ErrorIs(t, err, envelope.ErrInvalid)
	var verr *envelope.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, class, verr.Class, "error: %v", err)
	require.Equal(t, field, verr.Field, "error: %v", err)
	require.True(t, strings.HasPrefix(err.Error(), "envelope: "), err.Error())
	require.NotEmpty(t, verr.Reason)
}
