package cerocketmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/protocol"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
)

func testEvent(t *testing.T) event.Event {
	t.Helper()
	ev := event.New()
	ev.SetID("0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f")
	ev.SetSource("/aivedio/api")
	ev.SetType("generation.submit.requested")
	ev.SetSubject("task-1")
	ev.SetTime(time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC))
	ev.SetExtension("tenantid", "tenant-1")
	ev.SetExtension("aggregatetype", "generation_task")
	ev.SetExtension("schemaversion", 1)
	ev.SetExtension("correlationid", "corr-1")
	ev.SetExtension("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	require.NoError(t, ev.SetData(event.ApplicationJSON, map[string]any{"task_id": "task-1", "version": 3}))
	return ev
}

// requireSameEvent compares events as the wire sees them: an integer
// extension read back from a string property is the same value.
func requireSameEvent(t *testing.T, want, got event.Event) {
	t.Helper()
	require.Equal(t, want.ID(), got.ID())
	require.Equal(t, want.Source(), got.Source())
	require.Equal(t, want.Type(), got.Type())
	require.Equal(t, want.Subject(), got.Subject())
	require.Equal(t, want.SpecVersion(), got.SpecVersion())
	require.True(t, want.Time().Equal(got.Time()), "time %s != %s", want.Time(), got.Time())
	require.Equal(t, want.DataContentType(), got.DataContentType())
	require.JSONEq(t, string(want.Data()), string(got.Data()))
	require.Len(t, got.Extensions(), len(want.Extensions()))
	for name, v := range want.Extensions() {
		wantS, err := types.Format(v)
		require.NoError(t, err)
		gotS, err := types.Format(got.Extensions()[name])
		require.NoError(t, err)
		require.Equal(t, wantS, gotS, "extension %s", name)
	}
}

func TestWriteBinary(t *testing.T) {
	t.Parallel()
	ev := testEvent(t)
	at := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	ctx := cerocketmq.WithMessageGroup(context.Background(), "task-1")
	ctx = cerocketmq.WithDeliveryTime(ctx, at)
	ctx = cerocketmq.WithTopic(ctx, "generation_submit_delay")

	var out mq.Message
	require.NoError(t, cerocketmq.WriteMessage(ctx, binding.ToMessage(&ev), &out))

	require.Equal(t, "generation_submit_delay", out.Topic)
	require.Equal(t, []string{ev.ID()}, out.Keys)
	require.Equal(t, "generation.submit.requested", out.Tag, "the tag defaults to the event type")
	require.Equal(t, "task-1", out.MessageGroup)
	require.Equal(t, at, out.DeliveryTime)
	require.Equal(t, map[string]string{
		"CE_specversion":     "1.0",
		"CE_id":              ev.ID(),
		"CE_source":          "/aivedio/api",
		"CE_type":            "generation.submit.requested",
		"CE_subject":         "task-1",
		"CE_time":            "2026-11-30T01:02:03.456789Z",
		"CE_datacontenttype": "application/json",
		"CE_tenantid":        "tenant-1",
		"CE_aggregatetype":   "generation_task",
		"CE_schemaversion":   "1",
		"CE_correlationid":   "corr-1",
		"CE_traceparent":     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	}, out.Properties)
	require.JSONEq(t, `{"task_id":"task-1","version":3}`, string(out.Body))

	back, err := binding.ToEvent(context.Background(), cerocketmq.NewMessage(&mq.Received{Message: out}, nil))
	require.NoError(t, err)
	requireSameEvent(t, ev, *back)
}

func TestWriteStructured(t *testing.T) {
	t.Parallel()
	ev := testEvent(t)
	ctx := cerocketmq.WithTag(binding.WithForceStructured(context.Background()), "PROBE")

	var out mq.Message
	require.NoError(t, cerocketmq.WriteMessage(ctx, binding.ToMessage(&ev), &out))

	require.Equal(t, map[string]string{"CE_datacontenttype": "application/cloudevents+json"}, out.Properties)
	require.Equal(t, []string{ev.ID()}, out.Keys)
	require.Equal(t, "PROBE", out.Tag)

	msg := cerocketmq.NewMessage(&mq.Received{Message: out}, nil)
	require.Equal(t, binding.EncodingStructured, msg.ReadEncoding())
	back, err := binding.ToEvent(context.Background(), msg)
	require.NoError(t, err)
	requireSameEvent(t, ev, *back)
}

func TestReadRejectsWhatIsNotACloudEvent(t *testing.T) {
	t.Parallel()
	for name, r := range map[string]*mq.Received{
		"plain message":            {Message: mq.Message{Body: []byte("hello")}},
		"unknown spec version":     {Message: mq.Message{Properties: map[string]string{"CE_specversion": "9.9"}}},
		"structured, not JSON":     {Message: mq.Message{Properties: map[string]string{"CE_datacontenttype": "application/cloudevents+json"}, Body: []byte("{nope")}},
		"binary, missing required": {Message: mq.Message{Properties: map[string]string{"CE_specversion": "1.0", "CE_id": "x"}}},
		"binary, bad time":         {Message: mq.Message{Properties: map[string]string{"CE_specversion": "1.0", "CE_id": "x", "CE_source": "/s", "CE_type": "t", "CE_time": "yesterday"}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ev, err := binding.ToEvent(context.Background(), cerocketmq.NewMessage(r, nil))
			if err == nil {
				err = ev.Validate()
			}
			require.Error(t, err)
		})
	}
}

// Finish hands the result to the settle function the message was made
// with, and is a no-op without one.
func TestFinishSettles(t *testing.T) {
	t.Parallel()
	var got []error
	m := cerocketmq.NewMessage(&mq.Received{MessageID: "m-1"}, func(err error) error {
		got = append(got, err)
		return nil
	})
	require.NoError(t, m.Finish(nil))
	require.NoError(t, m.Finish(protocol.ResultNACK))
	require.Equal(t, []error{nil, protocol.ResultNACK}, got)
	require.NoError(t, cerocketmq.NewMessage(&mq.Received{}, nil).Finish(protocol.ResultNACK))
}
