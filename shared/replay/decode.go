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
