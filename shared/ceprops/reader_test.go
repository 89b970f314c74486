package ceprops_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/ceprops"
)

func testEvent(t testing.TB) event.Event {
	t.Helper()
	ev := event.New()
	ev.SetID("0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f")
	ev.SetSource("/aivedio/api")
	ev.SetType("generation.submit.requested")
	ev.SetSubject("task-1")
	ev.SetTime(time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC))
	ev.SetExtension("tenantid", "tenant-1")
	require.NoError(t, ev.SetData(event.ApplicationJSON, map[string]any{"task_id": "task-1"}))
	return ev
}

// binaryProps is ev in binary mode, as the RocketMQ binding writes it.
func binaryProps(ev event.Event) map[string]string {
	return map[string]string{
		ceprops.SpecVersion: ev.SpecVersion(), "CE_id": ev.ID(), "CE_source": ev.Source(), "CE_type": ev.Type(),
		"CE_subject": ev.Subject(), "CE_time": ev.Time().Format(time.RFC3339Nano), ceprops.ContentType: ev.DataContentType(),
		"CE_tenantid": "tenant-1", "not_ce": "ignored",
	}
}

func TestToEventReadsBothModes(t *testing.T) {
	t.Parallel()
	ev := testEvent(t)
	structured, err := json.Marshal(ev)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		props map[string]string
		body  []byte
	}{
		"binary":     {binaryProps(ev), ev.Data()},
		"structured": {map[string]string{ceprops.ContentType: ceprops.ContentTypeStructured}, structured},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := ceprops.ToEvent(tc.props, tc.body)
			require.NoError(t, err)
			require.Equal(t, ev.ID(), got.ID())
			require.Equal(t, ev.Type(), got.Type())
			require.Equal(t, ev.Subject(), got.Subject())
			require.True(t, ev.Time().Equal(got.Time()))
			require.Equal(t, "tenant-1", got.Extensions()["tenantid"])
			require.JSONEq(t, string(ev.Data()), string(got.Data()))
		})
	}
}

func TestNotACloudEvent(t *testing.T) {
	t.Parallel()
	for name, props := range map[string]map[string]string{
		"no properties":        {},
		"unknown spec version": {ceprops.SpecVersion: "9.9"},
		"other content type":   {ceprops.ContentType: "application/json"},
	} {
		_, err := ceprops.ToEvent(props, []byte("hello"))
		require.ErrorIs(t, err, ceprops.ErrNotCloudEvent, name)
		r := ceprops.NewReader(props, nil)
		require.Equal(t, binding.EncodingUnknown, r.ReadEncoding(), name)
		attr, v := r.GetAttribute(spec.ID)
		require.Nil(t, attr, name)
		require.Nil(t, v, name)
	}
}

func TestMetadataOfABinaryMessage(t *testing.T) {
	t.Parallel()
	ev := testEvent(t)
	r := ceprops.NewReader(binaryProps(ev), nil)
	require.Equal(t, binding.EncodingBinary, r.ReadEncoding())
	_, id := r.GetAttribute(spec.ID)
	require.Equal(t, ev.ID(), id)
	require.Equal(t, "tenant-1", r.GetExtension("tenantid"))
	require.Nil(t, r.GetExtension("missing"))
}

// FuzzToEvent: never panics, and what it reads has the id and type its
// properties or body named.
func FuzzToEvent(f *testing.F) {
	ev := testEvent(f)
	props, err := json.Marshal(binaryProps(ev))
	require.NoError(f, err)
	structured, err := json.Marshal(ev)
	require.NoError(f, err)
	f.Add(props, []byte(ev.Data()))
	f.Add([]byte(`{"CE_datacontenttype":"application/cloudevents+json"}`), structured)
	f.Add([]byte(`{"CE_specversion":"0.3"}`), []byte(`{}`))
	f.Add([]byte(`{}`), []byte{0xff})
	f.Fuzz(func(t *testing.T, propsJSON, body []byte) {
		var props map[string]string
		if json.Unmarshal(propsJSON, &props) != nil {
			return
		}
		got, err := ceprops.ToEvent(props, body)
		if err != nil {
			return
		}
		if props[ceprops.SpecVersion] != "" && props[ceprops.ContentType] != ceprops.ContentTypeStructured {
			require.Equal(t, props["CE_id"], got.ID())
		}
	})
}
