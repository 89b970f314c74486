package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// ErrDuplicateEvent reports an event id that is already in outbox_events, or
// that appears twice in one [Write] call. Event ids are chosen once per event
// (envelope.New); a republish reuses the stored row and never writes it again,
// so a duplicate is a bug in the producer.
var ErrDuplicateEvent = errors.New("duplicate outbox event")

// insertColumns are the columns Write fills, in the order of its parameters;
// the others keep their defaults.
//
// One multi-row INSERT ... VALUES: one round trip, one firing of the
// statement-level NOTIFY trigger, and a unique violation that names the
// event. It costs about a third less than unnest over sixteen arrays for the
// usual one to three events; pgx prepares it once per row count and
// connection.
const insertColumns = "event_id, event_type, schema_version, producer, topic, tag, message_group, deliver_at, " +
	"aggregate_type, aggregate_id, tenant_id, trace_id, correlation_id, causation_id, payload, occurred_at, " +
	"trace_parent, trace_state"

const (
	paramsPerRow = 18
	// maxRowsPerStatement keeps a statement well under PostgreSQL's 65535
	// parameters; a larger call sends several statements in one batch.
	maxRowsPerStatement = 1000
)

// Write stores events in outbox_events through tx, the caller's transaction,
// in one round trip. They become visible to the relay, and are published,
// only if tx commits; Write itself never commits or rolls back.
//
// Every event is validated before anything is sent (see the package
// documentation for the rules): an invalid event fails the call with an error
// matching [ErrInvalidEvent], nothing is written, and tx is still usable. An
// event id already stored fails with [ErrDuplicateEvent]; PostgreSQL has then
// aborted tx and the caller must roll it back, as after any other database
// error. Writing no events is a no-op.
//
// An event without a TraceParent gets ctx's span as its parent when that
// span belongs to the event's trace, or the event has none yet: so the
// handler of the event is a child of the span that wrote it.
func Write(ctx context.Context, tx pgx.Tx, events ...Event) error {
	if len(events) == 0 {
		return nil
	}
	now := time.Now()
	args := make([]any, 0, len(events)*paramsPerRow)
	seen := make(map[uuid.UUID]int, len(events))
	traceParent, traceState := telemetry.TraceParent(ctx)
	for i, e := range events {
		e.Envelope = withTraceParent(e.Envelope, traceParent, traceState)
		r, err := e.check(i, now)
		if err != nil {
			return err
		}
		if first, dup := seen[r.eventID]; dup {
			return fmt.Errorf("%w %s: events[%d] and events[%d] have the same event id", ErrDuplicateEvent, r.eventID, first, i)
		}
		seen[r.eventID] = i
		args = appendArgs(args, e, r)
	}

	var err error
	if len(events) <= maxRowsPerStatement {
		_, err = tx.Exec(ctx, insertSQL(len(events)), args...)
	} else {
		batch := &pgx.Batch{}
		for first := 0; first < len(events); first += maxRowsPerStatement {
			n := min(maxRowsPerStatement, len(events)-first)
			batch.Queue(insertSQL(n), args[first*paramsPerRow:(first+n)*paramsPerRow]...)
		}
		err = tx.SendBatch(ctx, batch).Close()
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && isEventIDConflict(pgErr) {
			return fmt.Errorf("%w %s: an event with this id is already in outbox_events: %w", ErrDuplicateEvent, duplicateKey(pgErr), err)
		}
		return fmt.Errorf("insert %d outbox events: %w", len(events), err)
	}
	return nil
}

// insertSQL is the INSERT of n rows.
func insertSQL(n int) string {
	var b strings.Builder
	b.Grow(len(insertColumns) + 48 + n*paramsPerRow*6)
	b.WriteString("INSERT INTO outbox_events (" + insertColumns + ") VALUES ")
	for row := range n {
		if row > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for col := range paramsPerRow {
			if col > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(row*paramsPerRow + col + 1))
		}
		b.WriteByte(')')
	}
	return b.String()
}

// appendArgs appends the parameters of one row, in insertColumns order.
// Empty optional fields are NULL.
func appendArgs(args []any, e Event, r row) []any {
	env := e.Envelope
	var deliverAt any
	if !e.DeliverAt.IsZero() {
		deliverAt = e.DeliverAt
	}
	return append(args,
		r.eventID, env.EventType, int32(env.SchemaVersion), env.Producer, e.Topic.Name, r.tag, nullable(e.MessageGroup), deliverAt,
		env.AggregateType, env.AggregateID, r.tenantID, nullable(env.TraceID), nullable(env.CorrelationID), nullable(env.CausationID),
		string(env.Payload), env.OccurredAt, nullable(env.TraceParent), nullable(env.TraceState))
}

// withTraceParent makes the span of traceparent env's parent, unless env
// has one or belongs to another trace.
func withTraceParent(env envelope.Envelope, traceparent, tracestate string) envelope.Envelope {
	if traceparent == "" || env.TraceParent != "" {
		return env
	}
	traceID := traceparent[3:35] // Inject writes version 00
	if env.TraceID != "" && env.TraceID != traceID {
		return env
	}
	env.TraceID, env.TraceParent, env.TraceState = traceID, traceparent, tracestate
	return env
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// isEventIDConflict reports a unique violation of the outbox's primary key.
// outbox_events is partitioned (migration 000012), and PostgreSQL names the
// partition's index in the error (outbox_events_p20261201_pkey, not
// outbox_events_pkey), so the key is recognised by its table and column:
// event_id is the only unique key of outbox_events and its partitions.
func isEventIDConflict(pgErr *pgconn.PgError) bool {
	return pgErr.Code == pgerrcode.UniqueViolation && strings.HasPrefix(pgErr.TableName, "outbox_events") &&
		strings.HasPrefix(pgErr.Detail, "Key (event_id)=")
}

// duplicateKey extracts the event id from the violation's detail,
// "Key (event_id)=(<id>) already exists.", so the error names the event.
func duplicateKey(pgErr *pgconn.PgError) string {
	_, rest, ok := strings.Cut(pgErr.Detail, "=(")
	if !ok {
		return "(id not reported)"
	}
	id, _, _ := strings.Cut(rest, ")")
	return id
}
