package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/ceprops"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/pg"
)

// Source says who quarantined a message.
type Source string

// The sources of quarantine rows.
const (
	SourceAdapter Source = "ADAPTER"
	SourceDLQ     Source = "DLQ"
)

// Entry is one quarantined message, kept whole so it can be inspected and
// replayed.
type Entry struct {
	Consumer        string // consumer group (firm name), the inbox consumer_name
	EventID         string // empty when the message carries no readable event id
	MessageID       string // broker message id
	Keys            []string
	Topic           string
	Tag             string
	ErrorClass      string // e.g. "permanent", "envelope.bad_id", "dlq"
	ErrorCode       string // short machine-readable reason
	ErrorDetail     string // what a person reads
	DeliveryAttempt int
	// DeliveryCount is how many deliveries failed, when the message's own
	// failure record (see [RecordFailure]) says nothing more; 0 means
	// DeliveryAttempt.
	DeliveryCount int
	Properties    map[string]string
	Body          []byte
	Source        Source
}

// Execer runs a statement: a pool, a connection or a transaction.
type Execer = pg.Querier

// maxDetail bounds the stored error text; a handler's error can be long.
const maxDetail = 4 << 10

// writeSQL writes the row, or counts a repeat on the row its consumer,
// event and payload already have, and deletes the message's failure
// record in the same statement, so the record goes exactly when the row
// is written. $18 and $19 are the record's error as read just before (the
// category, computed in Go, depends on it).
const writeSQL = `
	WITH failure AS (
		DELETE FROM delivery_failures WHERE consumer_name = $1 AND message_id = $3
		RETURNING first_failed_at, failures
	)
	INSERT INTO message_quarantine (consumer_name, event_id, message_id, topic, tag, error_class,
		error_code, error_detail, delivery_attempt, properties, body, source,
		payload_snapshot, schema_version, message_key, category, last_error_code, last_error,
		first_failed_at, last_failed_at, delivery_count)
	SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $18, $19,
		coalesce((SELECT first_failed_at FROM failure), now()), now(),
		greatest($17, coalesce((SELECT failures FROM failure), 0) + CASE WHEN $12 = 'ADAPTER' THEN 1 ELSE 0 END, 1)
	ON CONFLICT ON CONSTRAINT message_quarantine_event_payload_key DO UPDATE SET
		message_id = EXCLUDED.message_id,
		delivery_attempt = greatest(message_quarantine.delivery_attempt, EXCLUDED.delivery_attempt),
		first_failed_at = least(message_quarantine.first_failed_at, EXCLUDED.first_failed_at),
		last_failed_at = greatest(message_quarantine.last_failed_at, EXCLUDED.last_failed_at),
		-- The same broker message again (its ACK was lost) is one more
		-- delivery; another copy brings its own failures.
		delivery_count = message_quarantine.delivery_count + CASE
			WHEN message_quarantine.message_id = EXCLUDED.message_id AND message_quarantine.source = EXCLUDED.source THEN 1
			ELSE EXCLUDED.delivery_count END,
		last_error_code = coalesce(EXCLUDED.last_error_code, message_quarantine.last_error_code),
		last_error = coalesce(EXCLUDED.last_error, message_quarantine.last_error)
	RETURNING xmax = 0`

// Write records e: a new row, or a repeat counted on the row the same
// consumer, event and payload already have (the seed's key: a message the
// broker delivers again, or the relay published twice). It folds in the
// message's failure record, so that a dead letter keeps the handler's own
// last error. It reports whether a new row was written.
func Write(ctx context.Context, db Execer, e Entry) (bool, error) {
	if e.Consumer == "" || e.MessageID == "" || e.Topic == "" || e.ErrorCode == "" {
		return false, errors.New("quarantine: consumer, message id, topic and error code are required")
	}
	if e.ErrorClass == "" {
		e.ErrorClass = "permanent"
	}
	if e.Source == "" {
		e.Source = SourceAdapter
	}
	var eventID *uuid.UUID
	if id, err := uuid.Parse(e.EventID); err == nil {
		eventID = &id
	}
	props := e.Properties
	if props == nil {
		props = map[string]string{}
	}
	propsJSON, err := json.Marshal(props)
	if err != nil {
		return false, fmt.Errorf("quarantine: encode properties: %w", err)
	}
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	var tag *string
	if e.Tag != "" {
		tag = &e.Tag
	}
	var schema *int
	if v, err := strconv.Atoi(props[ceprops.Prefix+envelope.ExtSchemaVersion]); err == nil && v >= 1 {
		schema = &v
	}
	var key *string
	if len(e.Keys) > 0 {
		k := strings.Join(e.Keys, " ")
		key = &k
	}
	last, found, err := LastFailure(ctx, db, e.Consumer, e.MessageID)
	if err != nil {
		return false, err
	}
	var lastCode, lastDetail *string
	if found {
		lastCode, lastDetail = &last.Code, &last.Detail
	}
	category := Categorize(e.ErrorClass, e.ErrorCode, last.Code)
	count := e.DeliveryCount
	if count == 0 {
		count = e.DeliveryAttempt
	}
	var written bool
	err = db.QueryRow(ctx, writeSQL,
		e.Consumer, eventID, e.MessageID, e.Topic, tag, e.ErrorClass,
		e.ErrorCode, truncate(Redact(e.ErrorDetail), maxDetail), max(e.DeliveryAttempt, 0), propsJSON, body, string(e.Source),
		string(Snapshot(body)), schema, key, string(category), max(count, 1), lastCode, lastDetail).Scan(&written)
	if err != nil {
		return false, fmt.Errorf("quarantine message %s of %s: %w", e.MessageID, e.Consumer, err)
	}
	return written, nil
}

// truncate cuts s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Count returns how many messages a consumer has in quarantine.
func Count(ctx context.Context, db pg.Querier, consumer string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM message_quarantine WHERE consumer_name = $1`, consumer).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count quarantine of %s: %w", consumer, err)
	}
	return n, nil
}
