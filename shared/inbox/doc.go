// Package inbox runs a consumer's handling of one event as an
// inbox-protected transaction, so the event's business effect happens
// exactly once per consumer however often the broker delivers it
// (docs/design.md §1, §6).
//
// # Guarantees
//
// [Do] opens a transaction, records (consumer, event id) in inbox_dedup,
// runs the handler's [Func] in the same transaction, records the [Result] it
// reports, and commits. Hence, for one consumer and one event id:
//
//   - at most one run of the function ever commits. The first delivery to
//     commit applies the effect; every later delivery, concurrent or not,
//     finds the row, does not run the function, and reports
//     [Outcome.Duplicate] with the result recorded then;
//   - a delivery whose function fails, or whose commit fails, leaves nothing:
//     neither the business rows nor the events it wrote with outbox.Write nor
//     the inbox row. The broker's redelivery gets a fresh chance;
//   - a concurrent delivery of an event still in flight waits for it on the
//     inbox row: it reports a duplicate if the first commits, and applies the
//     event itself if the first rolls back.
//
// The function may run more than once, though never with two committed
// effects: on each delivery that finds no committed row, and again within one
// call after a serialization failure or deadlock. It must therefore do
// nothing outside its transaction: no provider, S3 or ffmpeg call inside it
// (persist the attempt, commit, call, record in a new transaction).
//
// # Acknowledging
//
// The source adapter acknowledges a message only after Do returned a nil
// error, which Do returns only after the commit succeeded (or for a
// duplicate). A commit whose outcome is unknown (the connection dropped) is
// an error: the message comes back, and the redelivery finds the row or
// applies the event, so either way the effect happens once.
//
// # Results and errors
//
// The function reports [Applied] (the effect happened) or [StaleNoop] (the
// event was older than the state it targets and changed nothing; docs/design.md
// §5). Both are successes and both are recorded; any other value is an error.
//
// An error from the function is returned unchanged after the rollback, so an
// outcome.Permanent or outcome.Retryable mark survives for the adapter.
// Serialization failures and deadlocks (SQLSTATE 40001, 40P01), wherever they
// arise, roll the transaction back and retry it with backoff, up to
// [MaxAttempts] in all; the last one is returned marked outcome.Retryable.
// A redelivery whose payload differs from the one recorded for its event id
// is not a redelivery but a producer reusing an id: that is an
// outcome.Permanent error with code "inbox.payload_mismatch", which the
// adapter quarantines. The recorded hash is SHA-256 of the payload bytes as
// delivered; every delivery of one outbox row carries the same bytes
// (outbox.ScanStored reads them in one normal form), so different bytes mean
// different content. An invalid envelope is permanent too.
//
// # Batches
//
// [DoBatch] handles several events in one transaction, which saves a
// durable commit per event. Each event is still deduplicated, and runs under
// a savepoint, so an event whose function fails rolls back only its own work
// and gets its own error; the others commit. The adapter acknowledges an
// event only when DoBatch returned a nil batch error and a nil error for that
// event. Events run in the order given, and a failed event does not stop the
// ones after it: do not batch messages whose relative order matters (one FIFO
// message group) unless the function tolerates reordering.
package inbox
