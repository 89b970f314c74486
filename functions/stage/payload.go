package stage

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
)

// Decode reads ev's payload into T by the envelope's compatibility rule
// (envelope.DecodePayload): a field T does not know is ignored, a required
// one must be there. A payload that does not fit is permanent: the same
// bytes will never fit.
func Decode[T any](ev envelope.Envelope) (T, error) {
	v, err := envelope.DecodePayload[T](ev)
	if err != nil {
		return v, outcome.Permanent("payload.invalid", err)
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

// Noop records ev as processed by consumer without doing anything: the
// answer to a stale or early event, so that its redeliveries are
// duplicates.
func Noop(ctx context.Context, db inbox.TxBeginner, consumer string, ev envelope.Envelope) error {
	_, err := inbox.Do(ctx, db, consumer, ev, func(context.Context, pgx.Tx) (inbox.Result, error) {
		return inbox.StaleNoop, nil
	})
	return err
}
