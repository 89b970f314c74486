package envelope_test

import (
	"encoding/json"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
)

// FuzzParse: Parse never panics, refuses only with a ValidationError, and
// whatever it accepts survives JSON and CloudEvents round trips unchanged.
func FuzzParse(f *testing.F) {
	for _, tc := range parseCases {
		f.Add([]byte(tc.data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := envelope.Parse(data)
		if err != nil {
			requireClassified(t, err)
			return
		}
		b, err := json.Marshal(e)
		require.NoError(t, err)
		again, err := envelope.Parse(b)
		require.NoError(t, err)
		require.Equal(t, e, again)

		ev, err := e.ToCloudEvent()
		require.NoError(t, err)
		fromCE, err := envelope.FromCloudEvent(ev)
		require.NoError(t, err)
		require.Equal(t, e, fromCE)
	})
}

// FuzzFromCloudEvent feeds structured-mode CloudEvents JSON: FromCloudEvent
// never panics, refuses only with a ValidationError, and whatever it accepts
// maps back to a structured event that reads as the same envelope.
func FuzzFromCloudEvent(f *testing.F) {
	for _, tc := range cloudEventCases {
		ev, err := validEnvelope().ToCloudEvent()
		require.NoError(f, err)
		tc.edit(&ev)
		if b, err := json.Marshal(ev); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"specversion":"1.0","id":"` + testEventID + `","type":"a.b","source":"/aivedio/api",` +
		`"time":"2026-11-30T12:34:56Z","subject":"s","datacontenttype":"application/json",` +
		`"data_base64":"eyJhIjoxfQ==","tenantid":"t","aggregatetype":"x","schemaversion":"1"}`))
	f.Add([]byte(`{"specversion":"1.0"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev event.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return
		}
		e, err := envelope.FromCloudEvent(ev)
		if err != nil {
			requireClassified(t, err)
			return
		}
		out, err := e.ToCloudEvent()
		require.NoError(t, err)
		b, err := json.Marshal(out)
		require.NoError(t, err)
		var back event.Event
		require.NoError(t, json.Unmarshal(b, &back))
		again, err := envelope.FromCloudEvent(back)
		require.NoError(t, err)
		require.Equal(t, e, again)
	})
}

func requireClassified(t *testing.T, err error) {
	t.Helper()
	require.ErrorIs(t, err, envelope.ErrInvalid)
	class, ok := envelope.ClassOf(err)
	require.True(t, ok)
	require.NotEmpty(t, class)
}
