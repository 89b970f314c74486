// Package envelope is the pipeline's event contract (docs/design.md §2): the
// [Envelope] every stage writes to the outbox and reads from the broker, its
// validation, and its mapping to and from CloudEvents v1.0.
//
// # Guarantees
//
// The event id is chosen once, by [New], and never changes: the outbox relay
// republishes an event with the same id, the broker may redeliver it, a replay
// sends it again, and consumers deduplicate on it in the inbox. Nothing in
// this package derives an envelope's identity from the time it was sent.
//
// Envelope -> CloudEvent -> Envelope is the identity, in binary and in
// structured mode, for every envelope this package returns ([New], [Parse],
// [FromCloudEvent] normalise OccurredAt to UTC and the payload to compact
// JSON, which is what makes that true). JSON encoding of an Envelope and
// [Parse] round-trip the same way.
//
// # Payload
//
// The payload holds ids, versions and references only: task and asset ids,
// state versions, object keys. Never media bytes, prompts or prompt history,
// secrets, API keys, or long-lived presigned URLs; a consumer that needs
// content fetches it by reference. [MaxPayloadBytes] (64 KiB) is a guard
// against mistakes, not a budget.
//
// # Schema compatibility
//
// Producers and consumers of one event are deployed at different times, so
// in a rolling deploy a consumer reads what a producer one release ahead (or
// behind) wrote. The rule that keeps that working:
//
//   - Within one schema_version changes are additive only: a new field is
//     optional and has a meaning when absent. Readers ignore a field they do
//     not know, in the envelope and in the payload ([Parse],
//     [FromCloudEvent], [DecodePayload]); a field a reader marks
//     `payload:"required"` must be present, and a known field of the wrong
//     type is refused. Nothing is renamed, retyped or removed.
//   - Anything else (a rename, a new required field, a changed meaning) is
//     a new schema_version, rolled out through a dual-read window: first a
//     release whose consumers read N and N+1 ([NewestReadSchemaVersion]
//     raised) while every producer still writes N; once every consumer runs
//     it, a release that writes N+1 ([SchemaVersion] raised) and still reads
//     N, for the messages in flight and in the retention window; then one
//     that reads N+1 only ([OldestReadSchemaVersion] raised). A build reads
//     at most two versions side by side. A payload type whose shape changed
//     reads the older version through its [Upgrader], which
//     [DecodePayload] calls for a payload older than the newest version
//     read.
//   - A version outside the window is [ClassUnsupportedSchema]: quarantined,
//     never retried, and replayed once a consumer that reads it runs.
//
// # Validation and errors
//
// [Envelope.Validate] checks every field; [New], [Parse], [FromCloudEvent] and
// [Envelope.ToCloudEvent] call it. Every failure is a [*ValidationError] with a
// [Class], and every one of them matches [ErrInvalid]. They are permanent by
// nature: the same bytes fail the same way on every delivery, so the source
// adapter quarantines such a message and ACKs it (docs/design.md §6) rather than
// retrying it. Use [ClassOf] to label the quarantine row or a metric.
//
// The only error that is not a [*ValidationError] is [New] failing to
// generate an event id, which says nothing about the envelope.
//
// # Usage
//
// A producer builds the envelope inside the transaction that changes the
// aggregate and hands it to the outbox; the event id it gets here is the one
// every delivery will carry:
//
//	e, err := envelope.New(envelope.NewParams{
//		EventType:     "generation.submit.requested",
//		Producer:      "api",
//		AggregateType: "generation_task",
//		AggregateID:   taskID,
//		TenantID:      tenantID,
//		TraceID:       traceID,
//		Payload:       submitRequested{TaskID: taskID, Version: version},
//	})
//
// A function handler reads the CloudEvent the source adapter delivered and
// treats a refusal as permanent:
//
//	e, err := envelope.FromCloudEvent(ev)
//	if errors.Is(err, envelope.ErrInvalid) {
//		return nil, err // permanent: the adapter quarantines and ACKs it
//	}
//
// # CloudEvents mapping
//
//	id              = event_id
//	type            = event_type
//	source          = /aivedio/<producer>      (see [Envelope.Source])
//	time            = occurred_at
//	subject         = aggregate_id
//	datacontenttype = application/json
//	data            = payload
//	tenantid, aggregatetype, schemaversion (integer), correlationid, causationid
//	traceparent     = traceparent, or 00-<trace_id>-<span id derived from event_id>-01
//	tracestate      = tracestate
//
// [Envelope.ToCloudEvent] builds the event; send it with sdk-go's HTTP
// binding in binary mode (the default) or structured mode. [FromCloudEvent]
// accepts either, ignores extensions it does not know (Knative's own), and reports errors against the CloudEvents attribute names.
package envelope
