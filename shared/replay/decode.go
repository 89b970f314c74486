package replay

import (
	"github.com/aivedio/pipeline/shared/ceprops"
	"github.com/aivedio/pipeline/shared/envelope"
)

// decodeEnvelope reads the envelope a quarantined message carries: its
// properties and body are the broker message as the CloudEvents RocketMQ
// binding wrote it, read back with the binding's own mapping, and the
// envelope is validated as a stage would.
func decodeEnvelope(props map[string]string, body []byte) (envelope.Envelope, error) {
	ev, err := ceprops.ToEvent(props, body)
	if err != nil {
		return envelope.Envelope{}, err
	}
	return envelope.FromCloudEvent(*ev)
}

// eventView is the report's view of an envelope.
func eventView(e envelope.Envelope) *Event {
	return &Event{
		EventID: e.EventID, EventType: e.EventType, SchemaVersion: e.SchemaVersion, Producer: e.Producer,
		OccurredAt: e.OccurredAt, AggregateType: e.AggregateType, AggregateID: e.AggregateID, TenantID: e.TenantID,
		TraceID: e.TraceID, CorrelationID: e.CorrelationID, CausationID: e.CausationID, Payload: e.Payload,
	}
}
