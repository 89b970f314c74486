// Package quarantine owns message_quarantine (DESIGN.md §6): the messages
// that can never be processed, poison the source adapter refused and dead
// letters the DLQ drain moved out of the broker, kept whole so they can be
// inspected and replayed. It is the one place that reads and writes the
// table.
//
// # Writing
//
// [Write] is idempotent on (consumer, broker message id): a crash between the
// write and the broker ACK, or the same message quarantined once by the
// adapter and again from the dead-letter queue, leaves one row. The caller
// ACKs only after Write returned nil, so a message is never both unrecorded
// and settled.
//
// # Reading
//
// [List] selects rows by a [Filter] (consumer, error class or code, status,
// time range), oldest first, without their bodies; [Read] and [OfEvent]
// return rows whole, properties and body as the broker message had them.
// [SelectEvents], [Copies] and [MarkReplayed] serve replay (shared/replay):
// one row per event however often it was quarantined, and every copy of an
// event marked REPLAYED in the transaction that writes its replay.
package quarantine
