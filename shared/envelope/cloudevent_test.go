package envelope_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
)

// received is what the test receiver made of one request.
type received struct {
	header http.Header
	env    envelope.Envelope
	err    error
}

type testBundle struct {
	server   *httptest.Server
	received chan received
}

// setup starts an HTTP receiver that reads each request with sdk-go's HTTP
// binding and maps it back with FromCloudEvent, like a function handler would.
func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{received: make(chan received, 1)}
	b.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := received{header: r.Header.Clone()}
		ev, err := cehttp.NewEventFromHTTPRequest(r)
		if err == nil {
			got.env, got.err = envelope.FromCloudEvent(*ev)
		} else {
			got.err = err
		}
		b.received <- got
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(b.server.Close)
	return b
}

// send posts ev in the given mode and returns what the receiver made of it.
func (b *testBundle) send(t *testing.T, ctx context.Context, ev event.Event) received {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.server.URL, nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req))
	return b.do(t, req)
}

func (b *testBundle) do(t *testing.T, req *http.Request) received {
	t.Helper()
	resp, err := b.server.Client().Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusAccepted, resp.StatusCode)
	return <-b.received
}

func TestRoundTripOverHTTP(t *testing.T) {
	t.Parallel()
	minimal := validEnvelope()
	minimal.TraceID, minimal.CorrelationID, minimal.CausationID = "", "", ""
	fresh, err := envelope.New(envelope.NewParams{
		EventType: "task.state.changed", Producer: "submit",
		AggregateType: "generation_task", AggregateID: "task-9", TenantID: "t-1",
		Payload: map[string]any{"note": "<a&b> ünïcode \u2028", "n": 1.5},
	})
	require.NoError(t, err)
	traced := validEnvelope()
	traced.TraceParent = "00-" + testTraceID + "-00f067aa0ba902b7-00"
	traced.TraceState = "vendor=opaque,other=1"
	envelopes := map[string]envelope.Envelope{"full": validEnvelope(), "minimal": minimal, "from New": fresh, "traced": traced}
	modes := map[string]func(context.Context) context.Context{
		"binary":     binding.WithForceBinary,
		"structured": binding.WithForceStructured,
	}
	for envName, want := range envelopes {
		for modeName, mode := range modes {
			t.Run(envName+"/"+modeName, func(t *testing.T) {
				t.Parallel()
				b := setup(t)
				ev, err := want.ToCloudEvent()
				require.NoError(t, err)
				got := b.send(t, mode(t.Context()), ev)
				require.NoError(t, got.err)
				require.Equal(t, want, got.env)
				if modeName == "binary" {
					require.Equal(t, want.EventID, got.header.Get("Ce-Id"))
					require.Equal(t, "application/json", got.header.Get("Content-Type"))
				} else {
					require.Equal(t, "application/cloudevents+json", got.header.Get("Content-Type"))
				}
			})
		}
	}
}

func TestToCloudEvent(t *testing.T) {
	t.Parallel()
	e := validEnvelope()
	ev, err := e.ToCloudEvent()
	require.NoError(t, err)
	require.Equal(t, event.CloudEventsVersionV1, ev.SpecVersion())
	require.Equal(t, e.EventID, ev.ID())
	require.Equal(t, e.EventType, ev.Type())
	require.Equal(t, "/aivedio/api", ev.Source())
	require.Equal(t, e.AggregateID, ev.Subject())
	require.True(t, e.OccurredAt.Equal(ev.Time()))
	require.Equal(t, "application/json", ev.DataContentType())
	require.JSONEq(t, string(e.Payload), string(ev.Data()))
	ext := ev.Extensions()
	require.Equal(t, "tenant-42", ext["tenantid"])
	require.Equal(t, "generation_task", ext["aggregatetype"])
	require.Equal(t, int32(1), ext["schemaversion"])
	require.Equal(t, e.CorrelationID, ext["correlationid"])
	require.Equal(t, e.CausationID, ext["causationid"])
	tp, ok := ext["traceparent"].(string)
	require.True(t, ok)
	require.Regexp(t, regexp.MustCompile(`^00-`+testTraceID+`-[0-9a-f]{16}-01$`), tp)

	again, err := e.ToCloudEvent()
	require.NoError(t, err)
	require.Equal(t, ev, again, "the mapping is deterministic")

	structured, err := json.Marshal(ev)
	require.NoError(t, err)
	require.Contains(t, string(structured), `"data":{"task_id":`)
	require.Contains(t, string(structured), `"schemaversion":1`)

	e.TenantID = ""
	_, err = e.ToCloudEvent()
	requireInvalid(t, err, envelope.ClassTenantMissing, "tenant_id")
}

// cloudEventCases drive TestFromCloudEvent and seed FuzzFromCloudEvent.
var cloudEventCases = []struct {
	name  string
	edit  func(ev *event.Event)
	class envelope.Class
	field string
}{
	{"valid", func(*event.Event) {}, "", ""},
	{"charset parameter", func(ev *event.Event) { ev.SetDataContentType("application/json; charset=utf-8") }, "", ""},
	{"unknown extension", func(ev *event.Event) { ev.SetExtension("tracestate", "vendor=1") }, "", ""},
	{"schemaversion as string", func(ev *event.Event) { ev.SetExtension("schemaversion", "1") }, "", ""},
	{"future traceparent version", func(ev *event.Event) {
		ev.SetExtension("traceparent", "01-"+testTraceID+"-"+derivedSpanID(ev)+"-01-what-comes-next")
	}, "", ""},
	{"nil context", func(ev *event.Event) { ev.Context = nil }, envelope.ClassMalformed, ""},
	{"specversion 0.3", func(ev *event.Event) { ev.SetSpecVersion("0.3") }, envelope.ClassBadAttribute, "specversion"},
	{"foreign source", func(ev *event.Event) { ev.SetSource("/other/api") }, envelope.ClassBadAttribute, "source"},
	{"bad producer", func(ev *event.Event) { ev.SetSource("/aivedio/API") }, envelope.ClassBadAttribute, "source"},
	{"text/plain", func(ev *event.Event) { ev.SetDataContentType("text/plain") }, envelope.ClassBadAttribute, "datacontenttype"},
	{"no datacontenttype", func(ev *event.Event) { ev.SetDataContentType("") }, envelope.ClassBadAttribute, "datacontenttype"},
	{"no tenantid", func(ev *event.Event) { ev.SetExtension("tenantid", nil) }, envelope.ClassTenantMissing, "tenantid"},
	{"tenantid number", func(ev *event.Event) { ev.SetExtension("tenantid", 42) }, envelope.ClassBadAttribute, "tenantid"},
	{"no aggregatetype", func(ev *event.Event) { ev.SetExtension("aggregatetype", nil) }, envelope.ClassMissingField, "aggregatetype"},
	{"no schemaversion", func(ev *event.Event) { ev.SetExtension("schemaversion", nil) }, envelope.ClassMissingField, "schemaversion"},
	{"schemaversion word", func(ev *event.Event) { ev.SetExtension("schemaversion", "one") }, envelope.ClassBadAttribute, "schemaversion"},
	{"schemaversion 2", func(ev *event.Event) { ev.SetExtension("schemaversion", 2) }, envelope.ClassUnsupportedSchema, "schemaversion"},
	// A newer schema may rename attributes: the version is what the
	// operator must see, not the first attribute it renamed.
	{"schemaversion 2 without aggregatetype", func(ev *event.Event) {
		ev.SetExtension("schemaversion", 2)
		ev.SetExtension("aggregatetype", nil)
		ev.SetExtension("tenantid", nil)
	}, envelope.ClassUnsupportedSchema, "schemaversion"},
	{"traceparent garbage", func(ev *event.Event) { ev.SetExtension("traceparent", "garbage") }, envelope.ClassBadAttribute, "traceparent"},
	{"traceparent upper", func(ev *event.Event) {
		ev.SetExtension("traceparent", "00-"+strings.ToUpper(testTraceID)+"-00f067aa0ba902b7-01")
	}, envelope.ClassBadAttribute, "traceparent"},
	{"traceparent zero trace", func(ev *event.Event) {
		ev.SetExtension("traceparent", "00-"+strings.Repeat("0", 32)+"-00f067aa0ba902b7-01")
	}, envelope.ClassBadAttribute, "traceparent"},
	{"traceparent zero parent", func(ev *event.Event) {
		ev.SetExtension("traceparent", "00-"+testTraceID+"-0000000000000000-01")
	}, envelope.ClassBadAttribute, "traceparent"},
	{"traceparent version ff", func(ev *event.Event) {
		ev.SetExtension("traceparent", "ff-"+testTraceID+"-00f067aa0ba902b7-01")
	}, envelope.ClassBadAttribute, "traceparent"},
	{"traceparent 00 too long", func(ev *event.Event) {
		ev.SetExtension("traceparent", "00-"+testTraceID+"-00f067aa0ba902b7-01-x")
	}, envelope.ClassBadAttribute, "traceparent"},
	{"id not a uuid", func(ev *event.Event) { ev.SetID("msg-1") }, envelope.ClassBadID, "id"},
	{"bad type", func(ev *event.Event) { ev.SetType("com.example.Thing") }, envelope.ClassBadAttribute, "type"},
	{"no time", func(ev *event.Event) { ev.SetTime(time.Time{}) }, envelope.ClassMissingField, "time"},
	{"no subject", func(ev *event.Event) { ev.SetSubject("") }, envelope.ClassMissingField, "subject"},
	{"no data", func(ev *event.Event) { ev.DataEncoded = nil }, envelope.ClassMissingField, "data"},
	{"data array", func(ev *event.Event) { ev.DataEncoded = []byte(`[1,2]`) }, envelope.ClassBadAttribute, "data"},
	{"data not json", func(ev *event.Event) { ev.DataEncoded = []byte(`{nope`) }, envelope.ClassMalformed, "data"},
	{"data too large", func(ev *event.Event) { ev.DataEncoded = []byte(bigPayload) }, envelope.ClassPayloadTooLarge, "data"},
}

// derivedSpanID is the parent id ToCloudEvent wrote into ev's traceparent
// for an envelope without a TraceParent.
func derivedSpanID(ev *event.Event) string {
	return strings.Split(ev.Extensions()["traceparent"].(string), "-")[2]
}

// TestTraceContext: a producer's own span travels as the traceparent and
// tracestate extensions (over HTTP: TestRoundTripOverHTTP); a later traceparent version continues as 00; a traceparent of another
// trace than trace_id, or a tracestate without a parent, is refused.
func TestTraceContext(t *testing.T) {
	t.Parallel()
	e := validEnvelope()
	e.TraceParent = "00-" + testTraceID + "-00f067aa0ba902b7-00"
	e.TraceState = "vendor=opaque,other=1"
	ev, err := e.ToCloudEvent()
	require.NoError(t, err)
	require.Equal(t, e.TraceParent, ev.Extensions()["traceparent"])
	require.Equal(t, e.TraceState, ev.Extensions()["tracestate"])
	got, err := envelope.FromCloudEvent(ev)
	require.NoError(t, err)
	require.Equal(t, e, got)

	ev.SetExtension("traceparent", "01-"+testTraceID+"-00f067aa0ba902b7-00-more")
	got, err = envelope.FromCloudEvent(ev)
	require.NoError(t, err)
	require.Equal(t, "00-"+testTraceID+"-00f067aa0ba902b7-00", got.TraceParent)

	other := e
	other.TraceParent = "00-" + strings.Repeat("ab", 16) + "-00f067aa0ba902b7-01"
	requireInvalid(t, other.Validate(), envelope.ClassBadAttribute, "traceparent")
	orphan := validEnvelope()
	orphan.TraceState = "vendor=1"
	requireInvalid(t, orphan.Validate(), envelope.ClassBadAttribute, "tracestate")
	_, err = orphan.ToCloudEvent()
	requireInvalid(t, err, envelope.ClassBadAttribute, "tracestate")
}

func TestFromCloudEvent(t *testing.T) {
	t.Parallel()
	for _, tc := range cloudEventCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := validEnvelope().ToCloudEvent()
			require.NoError(t, err)
			tc.edit(&ev)
			e, err := envelope.FromCloudEvent(ev)
			if tc.class == "" {
				require.NoError(t, err)
				require.Equal(t, validEnvelope(), e)
				return
			}
			requireInvalid(t, err, tc.class, tc.field)
		})
	}
}

// TestBinaryWithoutExtensions posts what a hand-written client might send:
// a binary-mode CloudEvent whose extensions are missing.
func TestBinaryWithoutExtensions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		drop  string
		class envelope.Class
	}{
		{"Ce-Tenantid", envelope.ClassTenantMissing},
		{"Ce-Aggregatetype", envelope.ClassMissingField},
		{"Ce-Schemaversion", envelope.ClassMissingField},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, b.server.URL,
				strings.NewReader(`{"task_id":"task-1"}`))
			require.NoError(t, err)
			for k, v := range map[string]string{
				"Ce-Specversion": "1.0", "Ce-Id": testEventID, "Ce-Type": "generation.submit.requested",
				"Ce-Source": "/aivedio/api", "Ce-Time": "2026-11-30T12:34:56Z", "Ce-Subject": "task-1",
				"Content-Type": "application/json", "Ce-Tenantid": "tenant-1",
				"Ce-Aggregatetype": "generation_task", "Ce-Schemaversion": "1",
			} {
				req.Header.Set(k, v)
			}
			req.Header.Del(tc.drop)
			got := b.do(t, req)
			requireInvalid(t, got.err, tc.class, strings.ToLower(strings.TrimPrefix(tc.drop, "Ce-")))
		})
	}
}
