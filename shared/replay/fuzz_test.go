package replay

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
)

// FuzzDecodeEnvelope feeds stored properties and bodies to the decoder: it
// never panics, and what it accepts is a valid envelope that maps back to
// the same CloudEvent id and type.
func FuzzDecodeEnvelope(f *testing.F) {
	e, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventSubmitRequested, Producer: "api", AggregateType: "generation_task",
		AggregateID: "0193aa00-1111-7222-8333-444455556666", TenantID: "0193aa00-0000-7000-8000-000000000042",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Payload: map[string]any{"task_id": "0193aa00-1111-7222-8333-444455556666"},
	})
	require.NoError(f, err)
	ev, err := e.ToCloudEvent()
	require.NoError(f, err)
	props := map[string]string{
		"CE_specversion": "1.0", "CE_id": ev.ID(), "CE_source": ev.Source(), "CE_type": ev.Type(), "CE_subject": ev.Subject(),
		"CE_time": ev.Time().Format(time.RFC3339Nano), "CE_datacontenttype": "application/json",
	}
	for name, v := range ev.Extensions() {
		s, err := types.Format(v)
		require.NoError(f, err)
		props["CE_"+name] = s
	}
	binary, err := json.Marshal(props)
	require.NoError(f, err)
	structured, err := json.Marshal(ev)
	require.NoError(f, err)
	f.Add(binary, []byte(ev.Data()))
	f.Add([]byte(`{"CE_datacontenttype":"application/cloudevents+json"}`), structured)
	f.Add([]byte(`{"CE_specversion":"0.3"}`), []byte(`{}`))
	f.Add([]byte(`{}`), []byte{0xff})

	f.Fuzz(func(t *testing.T, propsJSON, body []byte) {
		var props map[string]string
		if json.Unmarshal(propsJSON, &props) != nil {
			return
		}
		got, err := decodeEnvelope(props, body)
		if err != nil {
			return
		}
		require.NoError(t, got.Validate())
		back, err := got.ToCloudEvent()
		require.NoError(t, err)
		require.Equal(t, got.EventID, back.ID())
		require.Equal(t, got.EventType, back.Type())
	})
}

// FuzzParseTime: never panics; an accepted time is UTC and not after now
// when given as an age.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{"2026-11-30T08:00:00Z", "90m", "7d", "", "-1h", "1e9d", "2026-11-30"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s, now)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			return
		}
		require.Equal(t, time.UTC, got.Location())
		if _, rfc := time.Parse(time.RFC3339Nano, s); rfc != nil {
			require.False(t, got.After(now), "an age lies in the past")
		}
	})
}
