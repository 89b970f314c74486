package inbox

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
)

// rollbackTimeout bounds a rollback, which runs even when ctx is done.
const rollbackTimeout = 5 * time.Second

// The inbox_dedup statements. The claim inserts the row before the function
// runs, so a concurrent delivery of the same event waits on its unique key
// instead of running the function too. Its result_code is provisional:
// record sets the real one before commit, and nobody sees the row earlier.
const (
	claimSQL = `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
		VALUES ($1, $2, 'APPLIED', $3)
		ON CONFLICT (consumer_name, event_id) DO NOTHING`
	recordedSQL = `SELECT result_code, payload_hash FROM inbox_dedup WHERE consumer_name = $1 AND event_id = $2`
	recordSQL   = `UPDATE inbox_dedup SET result_code = $3 WHERE consumer_name = $1 AND event_id = $2`
)

// entry is the inbox row one delivery claims.
type entry struct {
	consumer string
	eventID  uuid.UUID
	hash     [sha256.Size]byte // of the payload as delivered
}

// newEntry checks the arguments of one delivery. An invalid envelope is
// permanent, classified like the envelope package classifies it.
func newEntry(consumer string, ev envelope.Envelope) (entry, error) {
	if consumer == "" {
		return entry{}, errNoConsumer
	}
	if err := ev.Validate(); err != nil {
		class, _ := envelope.ClassOf(err)
		return entry{}, outcome.Permanent("envelope."+string(class), fmt.Errorf("inbox: %w", err))
	}
	return entry{
		consumer: consumer,
		eventID:  uuid.MustParse(ev.EventID), // Validate checked it is a UUID.
		hash:     sha256.Sum256(ev.Payload),
	}, nil
}

// claim inserts the inbox row in tx. done reports that the event was
// already processed, so the function must not run and tx has changed
// nothing: out then holds what was recorded, or err says why the delivery
// cannot be acknowledged (a permanent error for a duplicate with another
// payload). An error with done false is a failure of the statements.
//
// Under READ COMMITTED the insert waits for a concurrent transaction holding
// the same key and then sees its outcome: a committed row (duplicate) or none
// (the insert proceeds). The SELECT after it is a new statement with a new
// snapshot, so it sees the row that made the insert do nothing. Both travel
// in one round trip, after the statements in before (DoBatch's savepoint).
func (e entry) claim(ctx context.Context, tx pgx.Tx, before ...string) (out Outcome, done bool, err error) {
	batch := &pgx.Batch{}
	for _, sql := range before {
		batch.Queue(sql)
	}
	batch.Queue(claimSQL, e.consumer, e.eventID, e.hash[:])
	batch.Queue(recordedSQL, e.consumer, e.eventID)
	results := tx.SendBatch(ctx, batch)
	defer func() {
		if cerr := results.Close(); cerr != nil && err == nil {
			out, done, err = Outcome{}, false, fmt.Errorf("claim inbox row of event %s for %s: %w", e.eventID, e.consumer, cerr)
		}
	}()
	for _, sql := range before {
		if _, err := results.Exec(); err != nil {
			return Outcome{}, false, fmt.Errorf("%s: %w", sql, err)
		}
	}
	tag, err := results.Exec()
	if err != nil {
		return Outcome{}, false, fmt.Errorf("insert inbox row of event %s for %s: %w", e.eventID, e.consumer, err)
	}
	var (
		result Result
		hash   []byte
	)
	err = results.QueryRow().Scan(&result, &hash)
	switch {
	case tag.RowsAffected() == 1:
		return Outcome{}, false, err // ours, with its provisional result
	case errors.Is(err, pgx.ErrNoRows):
		// Deleted between the two statements: only pruning could, and it
		// keeps the replay window. Let the broker bring it back.
		return Outcome{}, true, outcome.Retryable("inbox.row_vanished",
			fmt.Errorf("inbox row of event %s for %s vanished while being read", e.eventID, e.consumer))
	case err != nil:
		return Outcome{}, false, fmt.Errorf("read inbox row of event %s for %s: %w", e.eventID, e.consumer, err)
	case string(hash) != string(e.hash[:]):
		return Outcome{}, true, outcome.Permanent("inbox.payload_mismatch", fmt.Errorf(
			"event %s was already processed by %s with another payload (sha256 %x then, %x now): the event id was reused for different content",
			e.eventID, e.consumer, hash, e.hash))
	}
	return Outcome{Duplicate: true, Result: result}, true, nil
}

// record stores the function's result in the claimed row. Applied is what
// claim wrote already, so the common case costs no statement.
func (e entry) record(ctx context.Context, tx pgx.Tx, result Result) error {
	if !result.valid() {
		return fmt.Errorf("inbox: handling event %s for %s returned result %q; want %q or %q",
			e.eventID, e.consumer, result, Applied, StaleNoop)
	}
	if result == Applied {
		return nil
	}
	if _, err := tx.Exec(ctx, recordSQL, e.consumer, e.eventID, string(result)); err != nil {
		return fmt.Errorf("record result of event %s for %s: %w", e.eventID, e.consumer, err)
	}
	return nil
}

// rollback ends tx, even when ctx is already done. Its error is ignored: a
// failed rollback closes the connection, which rolls back too.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx)
}
