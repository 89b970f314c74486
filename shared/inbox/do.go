package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Result is what a [Func] reports about its effect. It is stored in
// inbox_dedup.result_code.
type Result string

// The results a [Func] may report.
const (
	// Applied: the event's effect happened.
	Applied Result = "APPLIED"
	// StaleNoop: the event was older than the state it targets (a versioned
	// update matched no row) and changed nothing. Still a success: the
	// message is acknowledged and never applied later.
	StaleNoop Result = "STALE_NOOP"
)

func (r Result) valid() bool { return r == Applied || r == StaleNoop }

// Outcome is what happened to one delivery.
type Outcome struct {
	// Duplicate: the event was already processed by this consumer, and the
	// function did not run now.
	Duplicate bool
	// Result is what the function reported now or, for a duplicate, what was
	// recorded when the event was processed.
	Result Result
}

// Func applies one event inside tx: its versioned updates, business rows and
// downstream events (outbox.Write). It must not commit or roll back tx and
// must not call anything outside the database (see the package
// documentation: it may run more than once, only one run commits).
type Func func(ctx context.Context, tx pgx.Tx) (Result, error)

// TxBeginner begins a transaction: a *pgxpool.Pool in production. (A *pgx.Conn
// works too; a pgx.Tx makes the inbox transaction a savepoint of it.)
type TxBeginner = pg.DB

// Do processes ev for consumer (its consumer group name) in an
// inbox-protected transaction, shaped like pgx.BeginTxFunc: it runs fn only
// if this consumer has not processed ev yet, and commits fn's work together
// with the record that ev was processed.
//
// A nil error means ev is done for consumer, now or before (see
// [Outcome.Duplicate]): acknowledge it. Otherwise nothing was recorded; fn's
// own error is returned unchanged. See the package documentation for the
// guarantees and the error classes.
//
// The transaction runs in a span "inbox <consumer>" that records whether
// the event was a duplicate and what fn reported.
func Do(ctx context.Context, db TxBeginner, consumer string, ev envelope.Envelope, fn Func) (Outcome, error) {
	e, err := newEntry(consumer, ev)
	if err != nil {
		return Outcome{}, err
	}
	ctx, span := telemetry.Tracer().Start(ctx, "inbox "+consumer, trace.WithAttributes(
		attribute.String("aivedio.consumer_group", consumer), attribute.String("cloudevents.event_id", ev.EventID)))
	defer span.End()
	out, err := retry(ctx, func() (Outcome, error) { return e.do(ctx, db, fn) })
	if err == nil {
		observe(consumer, ev, out)
		span.SetAttributes(attribute.Bool("aivedio.inbox_duplicate", out.Duplicate), attribute.String("aivedio.inbox_result", string(out.Result)))
	}
	telemetry.SpanError(span, err)
	return out, err
}

// do is one attempt of [Do].
func (e entry) do(ctx context.Context, db TxBeginner, fn Func) (Outcome, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return Outcome{}, fmt.Errorf("begin inbox transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			rollback(ctx, tx)
		}
	}()

	out, done, err := e.claim(ctx, tx)
	if err != nil || done {
		return out, err // already processed: the deferred rollback leaves nothing
	}
	result, err := fn(ctx, tx)
	if err != nil {
		return Outcome{}, err
	}
	if err := e.record(ctx, tx, result); err != nil {
		return Outcome{}, err
	}
	committed = true // after Commit, successful or not, there is nothing to roll back
	if err := tx.Commit(ctx); err != nil {
		return Outcome{}, fmt.Errorf("commit inbox transaction of event %s for %s: %w", e.eventID, e.consumer, err)
	}
	return Outcome{Result: result}, nil
}

// errNoConsumer reports an empty consumer name.
var errNoConsumer = errors.New("inbox: consumer name is required (the consumer group name)")
