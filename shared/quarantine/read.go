package quarantine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/ceprops"
	"github.com/aivedio/pipeline/shared/pg"
)

// ErrNotFound: no quarantine row has that id.
var ErrNotFound = errors.New("quarantined message not found")

// Message is a message_quarantine row without its body.
type Message struct {
	QuarantineID    uuid.UUID `json:"quarantine_id"`
	Consumer        string    `json:"consumer"`
	EventID         string    `json:"event_id,omitempty"`
	EventType       string    `json:"event_type,omitempty"`   // from the CE_type property
	AggregateID     string    `json:"aggregate_id,omitempty"` // from the CE_subject property
	MessageID       string    `json:"message_id"`
	Topic           string    `json:"topic"`
	Tag             string    `json:"tag,omitempty"`
	ErrorClass      string    `json:"error_class"`
	ErrorCode       string    `json:"error_code"`
	ErrorDetail     string    `json:"error_detail,omitempty"`
	DeliveryAttempt int       `json:"delivery_attempt"`
	Source          string    `json:"source"`
	Status          string    `json:"status"`
	ReceivedAt      time.Time `json:"received_at"`
}

// Stored is a message_quarantine row whole: the broker message's
// properties and body as they were quarantined, to read the event back
// with shared/ceprops.
type Stored struct {
	Message
	Properties map[string]string
	Body       []byte
}

// messageColumns are what scanMessage reads.
const messageColumns = `quarantine_id, consumer_name, coalesce(event_id::text, ''), message_id, topic, coalesce(tag, ''),
	error_class, error_code, coalesce(error_detail, ''), delivery_attempt, source, status, received_at, properties`

func scanMessage(r pgx.CollectableRow) (Stored, error) {
	var m Stored
	err := r.Scan(&m.QuarantineID, &m.Consumer, &m.EventID, &m.MessageID, &m.Topic, &m.Tag,
		&m.ErrorClass, &m.ErrorCode, &m.ErrorDetail, &m.DeliveryAttempt, &m.Source, &m.Status, &m.ReceivedAt, &m.Properties)
	if err != nil {
		return Stored{}, fmt.Errorf("read quarantine row: %w", err)
	}
	m.derive()
	return m, nil
}

// scanStored reads messageColumns followed by the body.
func scanStored(r pgx.CollectableRow) (Stored, error) {
	var m Stored
	err := r.Scan(&m.QuarantineID, &m.Consumer, &m.EventID, &m.MessageID, &m.Topic, &m.Tag,
		&m.ErrorClass, &m.ErrorCode, &m.ErrorDetail, &m.DeliveryAttempt, &m.Source, &m.Status, &m.ReceivedAt, &m.Properties, &m.Body)
	if err != nil {
		return Stored{}, fmt.Errorf("read quarantine row: %w", err)
	}
	m.derive()
	return m, nil
}

// derive fills what a row's properties tell.
func (m *Stored) derive() {
	m.ReceivedAt = m.ReceivedAt.UTC()
	m.EventType = m.Properties[ceprops.Prefix+"type"]
	m.AggregateID = m.Properties[ceprops.Prefix+"subject"]
	if m.EventType == "" && strings.Contains(m.Tag, ".") {
		m.EventType = m.Tag // tags are event types except on asset.postprocess
	}
}

// Read reads one row whole; [ErrNotFound] when there is none.
func Read(ctx context.Context, q pg.Querier, id uuid.UUID) (Stored, error) {
	rows, err := q.Query(ctx, `SELECT `+messageColumns+`, body FROM message_quarantine WHERE quarantine_id = $1`, id)
	if err != nil {
		return Stored{}, fmt.Errorf("read quarantine row %s: %w", id, err)
	}
	m, err := pgx.CollectExactlyOneRow(rows, scanStored)
	if errors.Is(err, pgx.ErrNoRows) {
		return Stored{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return m, err
}

// OfEvent reads the rows of one event, whole, of one consumer when
// consumer is not empty: open rows first, then oldest first.
func OfEvent(ctx context.Context, q pg.Querier, eventID uuid.UUID, consumer string) ([]Stored, error) {
	sql := `SELECT ` + messageColumns + `, body FROM message_quarantine WHERE event_id = $1`
	args := []any{eventID}
	if consumer != "" {
		sql += ` AND consumer_name = $2`
		args = append(args, consumer)
	}
	rows, err := q.Query(ctx, sql+` ORDER BY (status = 'QUARANTINED') DESC, received_at, quarantine_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("find quarantined event %s: %w", eventID, err)
	}
	return pgx.CollectRows(rows, scanStored)
}

// Copies lists the other open rows of m's event and consumer: the same
// message quarantined by the adapter and again from the dead-letter queue.
func Copies(ctx context.Context, q pg.Querier, m Message) ([]uuid.UUID, error) {
	if m.EventID == "" {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT quarantine_id FROM message_quarantine
		WHERE consumer_name = $1 AND event_id = $2 AND quarantine_id <> $3 AND status = 'QUARANTINED'
		ORDER BY received_at, quarantine_id`, m.Consumer, m.EventID, m.QuarantineID)
	if err != nil {
		return nil, fmt.Errorf("read copies of quarantine row %s: %w", m.QuarantineID, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// MarkReplayed marks the open rows of an event for a consumer REPLAYED,
// in the transaction that wrote the replay, and counts them.
func MarkReplayed(ctx context.Context, tx pgx.Tx, consumer, eventID string) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE message_quarantine SET status = 'REPLAYED'
		WHERE consumer_name = $1 AND event_id = $2 AND status = 'QUARANTINED'`, consumer, eventID)
	if err != nil {
		return 0, fmt.Errorf("mark quarantine of %s replayed: %w", eventID, err)
	}
	return tag.RowsAffected(), nil
}
