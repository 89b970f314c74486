package quarantine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Failure is the last retryable failure of a message the broker is still
// redelivering: what the source adapter records in delivery_failures on
// every failed delivery, so that if the broker gives up and moves the
// message to its dead-letter topic, the drain's quarantine row says what
// the handler said, not only that the attempts ran out.
type Failure struct {
	Consumer  string
	MessageID string
	EventID   string // empty when the message carries no readable event id
	Code      string
	Detail    string
	// FirstAt, LastAt and Count are filled by [LastFailure].
	FirstAt, LastAt time.Time
	Count           int
}

// RecordFailure records a failed delivery of f's message: the first one,
// or one more with its latest error.
func RecordFailure(ctx context.Context, db Execer, f Failure) error {
	if f.Consumer == "" || f.MessageID == "" || f.Code == "" {
		return errors.New("quarantine: consumer, message id and error code are required")
	}
	var eventID *uuid.UUID
	if id, err := uuid.Parse(f.EventID); err == nil {
		eventID = &id
	}
	_, err := db.Exec(ctx, `
		INSERT INTO delivery_failures (consumer_name, message_id, event_id, error_code, error_detail)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (consumer_name, message_id) DO UPDATE SET
			error_code = EXCLUDED.error_code, error_detail = EXCLUDED.error_detail,
			last_failed_at = now(), failures = delivery_failures.failures + 1`,
		f.Consumer, f.MessageID, eventID, f.Code, truncate(Redact(f.Detail), maxDetail))
	if err != nil {
		return fmt.Errorf("record failed delivery of %s to %s: %w", f.MessageID, f.Consumer, err)
	}
	return nil
}

// ForgetFailure removes the failure record of a message that was settled
// after all.
func ForgetFailure(ctx context.Context, db Execer, consumer, messageID string) error {
	if _, err := db.Exec(ctx, `DELETE FROM delivery_failures WHERE consumer_name = $1 AND message_id = $2`, consumer, messageID); err != nil {
		return fmt.Errorf("forget failed deliveries of %s to %s: %w", messageID, consumer, err)
	}
	return nil
}

// LastFailure reads a message's failure record, if it has one.
func LastFailure(ctx context.Context, db Execer, consumer, messageID string) (Failure, bool, error) {
	f := Failure{Consumer: consumer, MessageID: messageID}
	var eventID *uuid.UUID
	var detail *string
	err := db.QueryRow(ctx, `SELECT event_id, error_code, error_detail, first_failed_at, last_failed_at, failures
		FROM delivery_failures WHERE consumer_name = $1 AND message_id = $2`, consumer, messageID).
		Scan(&eventID, &f.Code, &detail, &f.FirstAt, &f.LastAt, &f.Count)
	if errors.Is(err, pgx.ErrNoRows) {
		return Failure{}, false, nil
	}
	if err != nil {
		return Failure{}, false, fmt.Errorf("read failed deliveries of %s to %s: %w", messageID, consumer, err)
	}
	if eventID != nil {
		f.EventID = eventID.String()
	}
	if detail != nil {
		f.Detail = *detail
	}
	return f, true, nil
}

// PruneFailures drops the failure records not updated for olderThan: the
// message was settled by a process that died before forgetting it, or its
// dead letter was never drained. It returns how many it dropped.
func PruneFailures(ctx context.Context, db Execer, olderThan time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM delivery_failures WHERE last_failed_at < now() - $1 * interval '1 millisecond'`, olderThan.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("prune failed deliveries: %w", err)
	}
	return tag.RowsAffected(), nil
}
