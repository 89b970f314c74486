// Package outbox writes events in the caller's database transaction, so an
// event exists exactly when the business change it announces committed
// (docs/design.md §1, §4). The outbox relay (adapter/relay) is the only reader that
// publishes them.
//
// # Guarantees
//
// [Write] inserts its events into outbox_events through the transaction it is
// given and never commits. So:
//
//   - the transaction commits: every event is stored and will be published at
//     least once, always with its own event id (the broker message key and the
//     consumers' dedup key), however often the relay retries or an operator
//     replays it;
//   - the transaction rolls back: no event is stored and none is ever
//     published, exactly like the business rows written beside them.
//
// Consumers may therefore see an event more than once, late, or out of order
// (except within one FIFO message group), but never an event whose cause did
// not commit. They deduplicate in the inbox (package inbox).
//
// Rows are invisible to the relay until commit; a statement-level trigger
// sends NOTIFY outbox_events on commit so the relay does not wait for its
// next poll.
//
// # Validation
//
// Write validates every event before it sends anything, and an invalid event
// fails the whole call with an error matching [ErrInvalidEvent] that names
// the event id (and its index) and the rule broken. Nothing has then been
// written and the transaction is still usable. The rules:
//
//   - the envelope passes [envelope.Envelope.Validate];
//   - tenant_id is a lower-case canonical UUID (the column is uuid);
//   - the topic is one of [catalog.Topics], with the type the catalog gives it;
//   - FIFO topics need a MessageGroup (by docs/design.md §2 the aggregate id); other
//     topics must not have one;
//   - DELAY topics need a DeliverAt no more than [MaxDelay] from now (the
//     RocketMQ proxy refuses longer delays); other topics must not have one;
//   - the tag, when set, is printable ASCII without space or '|' (RocketMQ
//     tag expressions use "||");
//   - no event id appears twice in one call.
//
// An event id already present in outbox_events fails with [ErrDuplicateEvent].
// PostgreSQL has then aborted the transaction: the caller must roll back.
//
// # Reading rows back
//
// The relay claims rows with its own SQL, returning [Columns], and turns each
// row back into a [Stored] with [ScanStored] (or all of them with [Scan]):
//
//	rows, err := tx.Query(ctx, `
//		UPDATE outbox_events SET lease_owner = $1, lease_until = now() + $2::interval
//		WHERE event_id IN (
//			SELECT event_id FROM outbox_events
//			WHERE published_at IS NULL AND available_at <= now()
//			ORDER BY available_at, created_at LIMIT $3 FOR UPDATE SKIP LOCKED)
//		RETURNING `+outbox.Columns, owner, lease, limit)
//	claimed, err := pgx.CollectRows(rows, outbox.ScanStored)
//
// Every field of the envelope comes back as written, with one exception: the
// payload column is jsonb, which keeps the JSON value but not its spelling
// (PostgreSQL orders object keys by length, then bytes, and drops duplicate
// keys). ScanStored returns the payload in the envelope's normal form
// (compact, as encoding/json writes it), so every read of one row, and hence
// every delivery of one event, carries the same bytes. Times come back in
// UTC and are stored to the microsecond (envelope.New already truncates
// OccurredAt). Rows written in one transaction share created_at, its
// start; the event id breaks the tie (UUIDv7 ids from envelope.New grow in
// the order they were made).
//
// [Pending] reports the backlog (unpublished rows and the age of the oldest)
// for metrics and readiness; [PendingFor], whether one aggregate's events
// are part of it, for the repairs that must not re-emit a step on its way.
package outbox
