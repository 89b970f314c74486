package envelope_test

import (
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/envelope"
)

type fetchDue struct {
	TaskID    uuid.UUID `json:"task_id" payload:"required"`
	AttemptID uuid.UUID `json:"attempt_id"`
	Round     int       `json:"round,omitempty"`
}

func withPayload(t *testing.T, payload string) envelope.Envelope {
	t.Helper()
	e, err := envelope.New(envelope.NewParams{EventType: "asset.fetch.requested", Producer: "test", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: json.RawMessage(payload)})
	require.NoError(t, err)
	return e
}

func TestDecodePayload(t *testing.T) {
	t.Parallel()
	id := uuid.New()

	// A newer producer of the same schema version added a field: read.
	got, err := envelope.DecodePayload[fetchDue](withPayload(t, `{"task_id":"`+id.String()+`","round":2,"not_before":"2026-12-01T00:00:00Z"}`))
	require.NoError(t, err)
	require.Equal(t, fetchDue{TaskID: id, Round: 2}, got)

	// An optional field may be missing.
	got, err = envelope.DecodePayload[fetchDue](withPayload(t, `{"task_id":"`+id.String()+`"}`))
	require.NoError(t, err)
	require.Equal(t, id, got.TaskID)

	tests := []struct {
		name, payload string
		class         envelope.Class
		field         string
	}{
		{"required field missing", `{"attempt_id":"` + id.String() + `"}`, envelope.ClassMissingField, "payload.task_id"},
		{"required field zero", `{"task_id":"00000000-0000-0000-0000-000000000000"}`, envelope.ClassMissingField, "payload.task_id"},
		{"known field mistyped", `{"task_id":"` + id.String() + `","round":"two"}`, envelope.ClassMalformed, "payload.round"},
		{"known field unreadable", `{"task_id":"not-a-uuid"}`, envelope.ClassMalformed, "payload"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := envelope.DecodePayload[fetchDue](withPayload(t, tt.payload))
			requireInvalid(t, err, tt.class, tt.field)
		})
	}
}

// renamedDue is a payload whose field was renamed in a new schema version:
// it reads the older version's shape through its Upgrader.
type renamedDue struct {
	TaskID uuid.UUID `json:"task_id" payload:"required"`
	Tries  int       `json:"tries"`
}

func (r *renamedDue) UpgradeFrom(_ int, payload json.RawMessage) error {
	var old struct {
		TaskID uuid.UUID `json:"task_id"`
		Round  int       `json:"round"`
	}
	if err := json.Unmarshal(payload, &old); err != nil {
		return err
	}
	*r = renamedDue{TaskID: old.TaskID, Tries: old.Round}
	return nil
}

// TestDecodePayloadUpgradesAnOlderVersion: a payload of a schema version
// older than the newest read goes through the type's Upgrader (and the
// required fields are still enforced); one of the current version does
// not.
func TestDecodePayloadUpgradesAnOlderVersion(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	older := withPayload(t, `{"task_id":"`+id.String()+`","round":3}`)
	older.SchemaVersion = envelope.NewestReadSchemaVersion - 1
	got, err := envelope.DecodePayload[renamedDue](older)
	require.NoError(t, err)
	require.Equal(t, renamedDue{TaskID: id, Tries: 3}, got)

	current := withPayload(t, `{"task_id":"`+id.String()+`","round":3,"tries":5}`)
	got, err = envelope.DecodePayload[renamedDue](current)
	require.NoError(t, err)
	require.Equal(t, renamedDue{TaskID: id, Tries: 5}, got, "the current version is read as it is")

	missing := withPayload(t, `{"round":3}`)
	missing.SchemaVersion = envelope.NewestReadSchemaVersion - 1
	_, err = envelope.DecodePayload[renamedDue](missing)
	require.ErrorIs(t, err, envelope.ErrInvalid)
	require.ErrorContains(t, err, "payload.task_id")
}
