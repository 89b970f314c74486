package outbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
)

// Columns are the outbox_events columns [ScanStored] reads, in its order.
// Select or return exactly these: `RETURNING ` + outbox.Columns. They are
// unqualified, so a statement joining another relation with an event_id
// column should select the ids in a subquery (WHERE event_id IN (...)).
const Columns = "event_id, event_type, schema_version, producer, topic, tag, message_group, deliver_at, " +
	"aggregate_type, aggregate_id, tenant_id, trace_id, correlation_id, causation_id, payload, occurred_at, " +
	"trace_parent, trace_state, publish_attempts, created_at"

// Stored is an event read back from outbox_events.
type Stored struct {
	// Event is the event as written, with its Tag filled in (the event type
	// when it was written empty). Its Topic is the catalog topic of the stored
	// name; a name the catalog no longer knows (a topic renamed while rows
	// were pending) comes back with that name, no logical topic, and the type
	// the row itself implies (FIFO with a message group, DELAY with a
	// delivery time, NORMAL otherwise), so the relay can still publish it.
	Event
	// PublishAttempts counts the relay's failed or unconfirmed sends so far.
	PublishAttempts int
	// CreatedAt is when the producing transaction wrote the row.
	CreatedAt time.Time
}

// ScanStored reads one row holding [Columns], for pgx.CollectRows and
// friends. It does not validate the envelope: a row is whatever was written,
// and the relay decides what to do with one it cannot publish.
func ScanStored(row pgx.CollectableRow) (Stored, error) {
	var (
		s                    Stored
		env                  = &s.Envelope
		topic                string
		group, trace         *string
		corr, caus           *string
		parent, state        *string
		deliverAt            *time.Time
		payload              []byte
		schemaVersion, tries int32
	)
	err := row.Scan(&env.EventID, &env.EventType, &schemaVersion, &env.Producer, &topic, &s.Tag, &group, &deliverAt,
		&env.AggregateType, &env.AggregateID, &env.TenantID, &trace, &corr, &caus, &payload, &env.OccurredAt,
		&parent, &state, &tries, &s.CreatedAt)
	if err != nil {
		return Stored{}, fmt.Errorf("scan outbox row: %w", err)
	}
	env.SchemaVersion = int(schemaVersion)
	env.OccurredAt = env.OccurredAt.UTC()
	env.TraceID, env.CorrelationID, env.CausationID = deref(trace), deref(corr), deref(caus)
	env.TraceParent, env.TraceState = deref(parent), deref(state)
	// jsonb prints "{"a": 1}"; the envelope's normal form is what
	// encoding/json writes: compact, HTML-escaped.
	compact, err := json.Marshal(json.RawMessage(payload))
	if err != nil {
		return Stored{}, fmt.Errorf("outbox row %s: payload: %w", env.EventID, err)
	}
	env.Payload = compact
	s.MessageGroup = deref(group)
	if deliverAt != nil {
		s.DeliverAt = deliverAt.UTC()
	}
	s.Topic = storedTopic(topic, s.MessageGroup != "", deliverAt != nil)
	s.PublishAttempts = int(tries)
	s.CreatedAt = s.CreatedAt.UTC()
	return s, nil
}

// Scan reads every row of rows with [ScanStored] and closes rows.
func Scan(rows pgx.Rows) ([]Stored, error) {
	return pgx.CollectRows(rows, ScanStored)
}

func storedTopic(name string, grouped, delayed bool) catalog.Topic {
	if t, ok := catalogTopics[name]; ok {
		return t
	}
	t := catalog.Topic{Name: name, Type: catalog.Normal}
	switch {
	case grouped:
		t.Type = catalog.FIFO
	case delayed:
		t.Type = catalog.Delay
	}
	return t
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// compile-time check that ScanStored fits pgx.CollectRows.
var _ pgx.RowToFunc[Stored] = ScanStored
