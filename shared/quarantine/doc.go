// Package quarantine owns message_quarantine (docs/design.md §6, seed 7.6.5 and
// 7.12.2): the messages that can never be processed, poison the source
// adapter refused and dead letters the DLQ drain moved out of the broker,
// kept whole so they can be inspected and replayed, with what a person
// needs to triage them. It is the one place that reads and writes the
// table, and delivery_failures beside it.
//
// # Writing
//
// [Write] is idempotent on the seed's key, (consumer, event id, payload
// hash): a crash between the write and the broker ACK, the same message
// quarantined by the adapter and again from the dead-letter queue, or the
// same event published twice, is one row whose delivery count and last
// failure move. The caller ACKs only after Write returned nil, so a message
// is never both unrecorded and settled. A row gets its category
// ([Categorize]: code defect, data defect, permission, dependency, dirty
// history) from its error code, and a redacted, bounded [Snapshot] of its
// payload; the body is kept whole for replay.
//
// The source adapter records each retried failure with [RecordFailure]
// before it hands the message back to the broker; when the broker gives up,
// Write folds that record into the dead letter's row, so the row keeps the
// handler's own last error and its first failure. [ForgetFailure] drops the
// record of a message settled after all, and [PruneFailures] what a dead
// process left behind.
//
// # Reading
//
// [List] selects rows by a [Filter] (consumer, error class, category or
// code, status, time range), oldest first, without their bodies; [Read],
// [OfEvent] and [Find] (by quarantine id or event id) return rows whole,
// [Stored.Detail] fit to read with the event it carries ([Stored.Event]). Every row carries its group's owner and
// handling deadline from the catalog; [OpenCounts] and [Collector] export
// the open ones for alerting. [SelectEvents], [Copies], [LockEvent],
// [MarkReplayed] and [MarkDiscarded] serve replay (shared/replay): one row
// per event however many payloads it came with, one decision at a time
// about an event's rows, and every open row of an event closed in the
// transaction that decides it. A row is QUARANTINED until it is REPLAYED
// or DISCARDED ([Status]).
package quarantine
