package envelope_test

import (
	"fmt"
	"time"

	"github.com/aivedio/pipeline/shared/envelope"
)

func ExampleNew() {
	e, err := envelope.New(envelope.NewParams{
		EventID:       "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f", // usually left empty: a new UUIDv7
		EventType:     "generation.submit.requested",
		Producer:      "api",
		OccurredAt:    time.Date(2026, 11, 30, 12, 34, 56, 123456789, time.UTC),
		AggregateType: "generation_task",
		AggregateID:   "task-1",
		TenantID:      "tenant-42",
		Payload:       map[string]any{"task_id": "task-1", "version": 1},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(e.Source())
	fmt.Println(e.OccurredAt.Format(time.RFC3339Nano))
	fmt.Println(string(e.Payload))
	// Output:
	// /aivedio/api
	// 2026-11-30T12:34:56.123456Z
	// {"task_id":"task-1","version":1}
}

func ExampleEnvelope_ToCloudEvent() {
	e, _ := envelope.New(envelope.NewParams{
		EventID:       "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f",
		EventType:     "asset.fetch.requested",
		Producer:      "poll",
		OccurredAt:    time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		AggregateType: "generation_task",
		AggregateID:   "task-1",
		TenantID:      "tenant-42",
		TraceID:       "4bf92f3577b34da6a3ce929d0e0e4736",
		Payload:       map[string]any{"task_id": "task-1"},
	})
	ev, err := e.ToCloudEvent()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ev.ID(), ev.Type(), ev.Source(), ev.Subject())
	fmt.Println(ev.Extensions()["tenantid"], ev.Extensions()["schemaversion"])
	fmt.Println(ev.Extensions()["traceparent"])

	back, err := envelope.FromCloudEvent(ev)
	fmt.Println(back.TraceID, err)
	// Output:
	// 01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f asset.fetch.requested /aivedio/poll task-1
	// tenant-42 1
	// 00-4bf92f3577b34da6a3ce929d0e0e4736-254aa9c982cdad2e-01
	// 4bf92f3577b34da6a3ce929d0e0e4736 <nil>
}

func ExampleParse() {
	_, err := envelope.Parse([]byte(`{"event_id":"not-a-uuid","schema_version":1}`))
	class, _ := envelope.ClassOf(err)
	fmt.Println(class)
	fmt.Println(err)

	_, err = envelope.Parse([]byte(`{"schema_version":7,"flavour":"new"}`))
	fmt.Println(err)
	// Output:
	// bad_id
	// envelope: event_id: "not-a-uuid" is not a lower-case canonical UUID such as "01936d3c-5b7e-7c3a-9f1e-2b4c6d8e0a1f"
	// envelope: schema_version: 7 is not supported (supported: 1)
}
