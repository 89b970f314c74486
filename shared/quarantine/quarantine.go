package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

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
	Topic           string
	Tag             string
	ErrorClass      string // e.g. "permanent", "envelope.bad_id", "dlq"
	ErrorCode       string // short machine-readable reason
	ErrorDetail     string // what a person reads
	DeliveryAttempt int
	Properties      map[string]string
	Body            []byte
	Source          Source
}

// Execer runs a statement: a pool, a connection or a transaction.
type Execer = pg.Querier

// maxDetail bounds the stored error text; a handler's error can be long.
const maxDetail = 4 << 10

// Write records e. It reports whether a new row was written (false: the
// message was already quarantined).
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
	detail := e.ErrorDetail
	if len(detail) > maxDetail {
		detail = detail[:maxDetail]
	}
	body := e.Body
	if body == nil {
		body = []byte{}
	}
	var tag *string
	if e.Tag != "" {
		tag = &e.Tag
	}
	tagged, err := db.Exec(ctx, `
		INSERT INTO message_quarantine (consumer_name, event_id, message_id, topic, tag, error_class,
			error_code, error_detail, delivery_attempt, properties, body, source)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT ON CONSTRAINT message_quarantine_consumer_message_key DO NOTHING`,
		e.Consumer, eventID, e.MessageID, e.Topic, tag, e.ErrorClass,
		e.ErrorCode, detail, max(e.DeliveryAttempt, 0), propsJSON, body, string(e.Source))
	if err != nil {
		return false, fmt.Errorf("quarantine message %s of %s: %w", e.MessageID, e.Consumer, err)
	}
	return tagged.RowsAffected() == 1, nil
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
