package quarantine

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/ceprops"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/pg"
)

// ErrNotFound: no quarantine row has that id.
var ErrNotFound = errors.New("quarantined message not found")

// Message is a message_quarantine row without its body.
type Message struct {
	QuarantineID  uuid.UUID `json:"quarantine_id"`
	Consumer      string    `json:"consumer"`
	EventID       string    `json:"event_id,omitempty"`
	EventType     string    `json:"event_type,omitempty"`   // from the CE_type property
	AggregateID   string    `json:"aggregate_id,omitempty"` // from the CE_subject property
	MessageID     string    `json:"message_id"`
	MessageKey    string    `json:"message_key,omitempty"`
	Topic         string    `json:"topic"`
	Tag           string    `json:"tag,omitempty"`
	SchemaVersion int       `json:"schema_version,omitempty"`
	PayloadHash   string    `json:"payload_hash"` // hex SHA-256 of the body
	ErrorClass    string    `json:"error_class"`
	ErrorCode     string    `json:"error_code"`
	ErrorDetail   string    `json:"error_detail,omitempty"`
	Category      Category  `json:"category"`
	// LastErrorCode and LastError are the handler's last error before the
	// broker gave up on a dead letter, when the source adapter recorded it.
	LastErrorCode   string    `json:"last_error_code,omitempty"`
	LastError       string    `json:"last_error,omitempty"`
	DeliveryAttempt int       `json:"delivery_attempt"`
	DeliveryCount   int       `json:"delivery_count"`
	FirstFailedAt   time.Time `json:"first_failed_at"`
	LastFailedAt    time.Time `json:"last_failed_at"`
	Source          string    `json:"source"`
	Status          Status    `json:"status"`
	ReceivedAt      time.Time `json:"received_at"`
	// Owner and DueAt come from the consumer group's catalog entry: the
	// team that handles it, and FirstFailedAt plus its handling deadline.
	Owner string    `json:"owner,omitempty"`
	DueAt time.Time `json:"due_at,omitzero"`
	// Snapshot is the body made fit to read: secrets redacted, at most 8 KiB.
	Snapshot json.RawMessage `json:"payload_snapshot,omitempty"`
	// Discard is the audit of a DISCARDED row.
	Discard *Discard `json:"discard,omitempty"`
}

// Open reports whether the message is still QUARANTINED: neither
// replayed nor discarded.
func (m Message) Open() bool { return m.Status == Quarantined }

// Overdue reports whether an open message is past its group's deadline.
func (m Message) Overdue(now time.Time) bool {
	return m.Open() && !m.DueAt.IsZero() && now.After(m.DueAt)
}

// Discard is who discarded a message, when, under which ticket and why.
type Discard struct {
	At       time.Time `json:"at"`
	Operator string    `json:"operator"`
	Ticket   string    `json:"ticket"`
	Reason   string    `json:"reason"`
}

// Stored is a message_quarantine row whole: the broker message's
// properties and body as they were quarantined, to read the event back
// with shared/ceprops.
type Stored struct {
	Message
	Properties map[string]string
	Body       []byte
}

// Event reads the envelope the message carries: its properties and body
// are the broker message as the CloudEvents RocketMQ binding wrote it,
// read back with the binding's own mapping, and the envelope is validated
// as a stage would.
func (s Stored) Event() (envelope.Envelope, error) {
	ev, err := ceprops.ToEvent(s.Properties, s.Body)
	if err != nil {
		return envelope.Envelope{}, err
	}
	return envelope.FromCloudEvent(*ev)
}

// Detail is a row whole, fit to read: its properties, its body, and the
// event it carries.
type Detail struct {
	Message
	Properties map[string]string `json:"properties"`
	// Body is the message body as text when it is UTF-8, else base64.
	Body         string             `json:"body"`
	BodyEncoding string             `json:"body_encoding"` // "utf-8" or "base64"
	Event        *envelope.Envelope `json:"event,omitempty"`
	EventError   string             `json:"event_error,omitempty"`
}

// Detail is s made fit to read.
func (s Stored) Detail() Detail {
	d := Detail{Message: s.Message, Properties: s.Properties}
	if utf8.Valid(s.Body) {
		d.Body, d.BodyEncoding = string(s.Body), "utf-8"
	} else {
		d.Body, d.BodyEncoding = base64.StdEncoding.EncodeToString(s.Body), "base64"
	}
	if env, err := s.Event(); err != nil {
		d.EventError = err.Error()
	} else {
		d.Event = &env
	}
	return d
}

// messageColumns are what scanMessage reads.
const messageColumns = `quarantine_id, consumer_name, coalesce(event_id::text, ''), message_id, coalesce(message_key, ''), topic, coalesce(tag, ''),
	coalesce(schema_version, 0), payload_hash, error_class, error_code, coalesce(error_detail, ''), category,
	coalesce(last_error_code, ''), coalesce(last_error, ''), delivery_attempt, delivery_count, first_failed_at, last_failed_at,
	source, status, received_at, payload_snapshot, discarded_at, coalesce(discarded_by, ''), coalesce(discard_ticket, ''),
	coalesce(discard_reason, ''), properties`

func scanMessage(r pgx.CollectableRow) (Stored, error) { return scanRow(r, false) }

// scanStored reads messageColumns followed by the body.
func scanStored(r pgx.CollectableRow) (Stored, error) { return scanRow(r, true) }

func scanRow(r pgx.CollectableRow, withBody bool) (Stored, error) {
	var (
		m           Stored
		hash        []byte
		snapshot    []byte
		discardedAt *time.Time
		d           Discard
	)
	dest := []any{&m.QuarantineID, &m.Consumer, &m.EventID, &m.MessageID, &m.MessageKey, &m.Topic, &m.Tag,
		&m.SchemaVersion, &hash, &m.ErrorClass, &m.ErrorCode, &m.ErrorDetail, &m.Category,
		&m.LastErrorCode, &m.LastError, &m.DeliveryAttempt, &m.DeliveryCount, &m.FirstFailedAt, &m.LastFailedAt,
		&m.Source, &m.Status, &m.ReceivedAt, &snapshot, &discardedAt, &d.Operator, &d.Ticket, &d.Reason, &m.Properties}
	if withBody {
		dest = append(dest, &m.Body)
	}
	if err := r.Scan(dest...); err != nil {
		return Stored{}, fmt.Errorf("read quarantine row: %w", err)
	}
	m.PayloadHash = hex.EncodeToString(hash)
	if len(snapshot) > 0 {
		m.Snapshot = snapshot
	}
	if discardedAt != nil {
		d.At = discardedAt.UTC()
		m.Discard = &d
	}
	m.derive()
	return m, nil
}

// derive fills what a row's properties and its group's catalog entry tell.
func (m *Stored) derive() {
	m.ReceivedAt = m.ReceivedAt.UTC()
	m.FirstFailedAt, m.LastFailedAt = m.FirstFailedAt.UTC(), m.LastFailedAt.UTC()
	m.EventType = m.Properties[ceprops.Prefix+"type"]
	m.AggregateID = m.Properties[ceprops.Prefix+"subject"]
	if m.EventType == "" && strings.Contains(m.Tag, ".") {
		m.EventType = m.Tag // tags are event types except on asset.postprocess
	}
	if g, ok := GroupOf(m.Consumer); ok {
		m.Owner = g.Owner
		if g.HandleWithin > 0 {
			m.DueAt = m.FirstFailedAt.Add(g.HandleWithin)
		}
	}
}

// GroupOf finds the catalog group a row's consumer names. A row records a
// group by its firm name, so a broker name, which the catalog also
// resolves, names none.
func GroupOf(consumer string) (catalog.Group, bool) {
	g, err := catalog.GroupByName(consumer)
	return g, err == nil && g.Name == consumer
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
	args = append(args, Quarantined)
	rows, err := q.Query(ctx, sql+` ORDER BY (status = $`+strconv.Itoa(len(args))+`) DESC, received_at, quarantine_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("find quarantined event %s: %w", eventID, err)
	}
	return pgx.CollectRows(rows, scanStored)
}

// ErrAmbiguous: an event id names rows of several consumer groups; name
// the group or the quarantine id.
var ErrAmbiguous = errors.New("ambiguous event id")

// Find reads, whole, the row that id names: the row of that quarantine id,
// else a row of the event of that id (of consumer when it is not empty),
// an open one first. None is [ErrNotFound]; an event quarantined for
// several consumers is [ErrAmbiguous], naming them.
func Find(ctx context.Context, q pg.Querier, id uuid.UUID, consumer string) (Stored, error) {
	if r, err := Read(ctx, q, id); !errors.Is(err, ErrNotFound) {
		return r, err
	}
	found, err := OfEvent(ctx, q, id, consumer)
	if err != nil {
		return Stored{}, err
	}
	if len(found) == 0 {
		return Stored{}, fmt.Errorf("%w: no row has quarantine id or event id %s", ErrNotFound, id)
	}
	var groups []string
	for _, f := range found {
		if !slices.Contains(groups, f.Consumer) {
			groups = append(groups, f.Consumer)
		}
	}
	if len(groups) > 1 {
		return Stored{}, fmt.Errorf("%w: event %s is quarantined for %s; name the consumer group or the quarantine id",
			ErrAmbiguous, id, strings.Join(groups, " and "))
	}
	return found[0], nil
}

// Copies lists the other open rows of m's event and consumer: the same
// event id under another payload.
func Copies(ctx context.Context, q pg.Querier, m Message) ([]uuid.UUID, error) {
	if m.EventID == "" {
		return nil, nil
	}
	rows, err := q.Query(ctx, `SELECT quarantine_id FROM message_quarantine
		WHERE consumer_name = $1 AND event_id = $2 AND quarantine_id <> $3 AND status = $4
		ORDER BY received_at, quarantine_id`, m.Consumer, m.EventID, m.QuarantineID, Quarantined)
	if err != nil {
		return nil, fmt.Errorf("read copies of quarantine row %s: %w", m.QuarantineID, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// MarkReplayed marks the open rows of an event for a consumer REPLAYED,
// in the transaction that wrote the replay, and counts them.
func MarkReplayed(ctx context.Context, tx pgx.Tx, consumer, eventID string) (int64, error) {
	tag, err := tx.Exec(ctx, `UPDATE message_quarantine SET status = $3
		WHERE consumer_name = $1 AND event_id = $2 AND status = $4`, consumer, eventID, Replayed, Quarantined)
	if err != nil {
		return 0, fmt.Errorf("mark quarantine of %s replayed: %w", eventID, err)
	}
	return tag.RowsAffected(), nil
}

// LockEvent serialises every decision about the message of m's event to
// m's consumer (replaying it, discarding it) until tx ends, so that a
// message is either replayed or discarded, and replayed once.
func LockEvent(ctx context.Context, tx pgx.Tx, m Message) error {
	key := m.EventID
	if key == "" {
		key = m.QuarantineID.String()
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "replay/"+m.Consumer+"/"+key); err != nil {
		return fmt.Errorf("lock replays of %s to %s: %w", key, m.Consumer, err)
	}
	return nil
}

// ErrNotOpen: the message was replayed or discarded already.
var ErrNotOpen = errors.New("quarantined message is not open")

// MarkDiscarded discards the open row id and the other open rows of its
// event for its consumer, with the audit d, in tx. It returns the rows
// marked; a row that is not open is [ErrNotOpen], saying what it is.
func MarkDiscarded(ctx context.Context, tx pgx.Tx, id uuid.UUID, d Discard) (int64, error) {
	var consumer string
	var status Status
	var eventID *uuid.UUID
	err := tx.QueryRow(ctx, `SELECT consumer_name, event_id, status FROM message_quarantine WHERE quarantine_id = $1 FOR UPDATE`, id).
		Scan(&consumer, &eventID, &status)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return 0, fmt.Errorf("read quarantine row %s: %w", id, err)
	}
	if status != Quarantined {
		return 0, fmt.Errorf("%w: message %s is %s already", ErrNotOpen, id, status)
	}
	tag, err := tx.Exec(ctx, `UPDATE message_quarantine SET status = $8,
			discarded_at = $3, discarded_by = $4, discard_ticket = $5, discard_reason = $6
		WHERE status = $9 AND (quarantine_id = $1 OR (consumer_name = $2 AND event_id = $7))`,
		id, consumer, d.At, d.Operator, d.Ticket, d.Reason, eventID, Discarded, Quarantined)
	if err != nil {
		return 0, fmt.Errorf("discard quarantine row %s: %w", id, err)
	}
	return tag.RowsAffected(), nil
}
