package stage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

// Decode reads ev's payload into T, refusing unknown fields. A payload that
// does not fit is permanent: the same bytes will never fit.
func Decode[T any](ev envelope.Envelope) (T, error) {
	var v T
	dec := json.NewDecoder(bytes.NewReader(ev.Payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return v, outcome.Permanentf("payload.invalid", "payload of %s does not fit its schema: %v", ev.EventType, err)
	}
	return v, nil
}

// CheckTenant refuses an event whose tenant is not the owner of the row it
// targets: never auto-fixed, quarantined with a security error class.
func CheckTenant(ev envelope.Envelope, owner uuid.UUID) error {
	if ev.TenantID != owner.String() {
		return outcome.Permanentf("security.tenant_mismatch", "event %s names tenant %s but its %s %s belongs to another tenant",
			ev.EventID, ev.TenantID, ev.AggregateType, ev.AggregateID)
	}
	return nil
}

// Require refuses a zero id in a payload.
func Require(name string, id uuid.UUID) error {
	if id == uuid.Nil {
		return outcome.Permanent("payload.invalid", fmt.Errorf("payload field %s is required", name))
	}
	return nil
}

// Noop records ev as processed by consumer without doing anything: the
// answer to a stale or early event, so that its redeliveries are
// duplicates.
func Noop(ctx context.Context, db inbox.TxBeginner, consumer string, ev envelope.Envelope) error {
	_, err := inbox.Do(ctx, db, consumer, ev, func(context.Context, pgx.Tx) (inbox.Result, error) {
		return inbox.StaleNoop, nil
	})
	return err
}
