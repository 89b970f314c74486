package relay_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
)

// event builds a valid outbox event for topic with the given tag.
func event(t *testing.T, topic catalog.Topic, tag, group string, deliverAt time.Time) outbox.Event {
	t.Helper()
	taskID := uuid.NewString()
	env, err := envelope.New(envelope.NewParams{
		EventType:     catalog.EventTaskStateChanged,
		Producer:      "relaytest",
		AggregateType: "generation_task",
		AggregateID:   taskID,
		TenantID:      uuid.NewString(),
		Payload:       map[string]any{"task_id": taskID},
	})
	require.NoError(t, err)
	return outbox.Event{Envelope: env, Topic: topic, Tag: tag, MessageGroup: group, DeliverAt: deliverAt}
}
