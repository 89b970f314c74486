// Package retention keeps outbox_events and inbox_dedup from growing
// without bound (seed 7.6.2, 7.6.3, 7.13.6): it creates their daily
// partitions ahead of time and drops whole partitions once they are
// outside the replay window. The reconcile scan runs [Maintain] on every
// tick; migration 000012 says how the tables are partitioned and why.
//
// # Guarantees
//
// Rows are never deleted one by one. A partition is dropped whole, and only
// when all of these hold, checked again under the lock that drops it:
//
//   - its upper bound (the first event id of the next day) is at least the
//     replay window (REPLAY_WINDOW, [config.DefaultReplayWindow]) in the
//     past: every UUIDv7 event in it is older than the window;
//   - none of its rows was written within the window (outbox created_at,
//     inbox processed_at): an id that does not carry its time (a UUIDv4
//     that happens to sort into the range, a producer whose clock is
//     behind) keeps its partition for a window after it was written;
//   - for the outbox, none of its rows is unpublished. Such a partition is
//     kept, reported with its count in [Kept], and dropped on a later tick
//     once the relay has published the rows.
//
// Hence an inbox row exists for at least the window after its event was
// created and after it was processed, so a redelivery within the window is
// still deduplicated; package replay refuses to replay an event older than
// the window for this reason. The default partition (ids that name no day
// with a partition, such as UUIDv4 ids) is never dropped; its row count is
// reported.
//
// # Partitions
//
// A day's partition is <table>_pYYYYMMDD (UTC) and holds the event ids from
// [DayStart] of that day to that of the next. [Maintain] creates every
// missing day from the start of the window to [Params.Ahead] days after
// today, so that events of today and the next days never fall into the
// default partition even when maintenance misses a few ticks. Days older
// than the window are not created: their rows stay in the default.
//
// # Locks
//
// A partition is created as a table of its own and then attached: ATTACH
// PARTITION takes SHARE UPDATE EXCLUSIVE on the parent, which writers and
// readers do not wait for (CREATE TABLE ... PARTITION OF would take ACCESS
// EXCLUSIVE). It still takes ACCESS EXCLUSIVE on the default partition,
// which it scans, so the claim queries that read every partition wait for
// the scan; the default is kept small for this reason, and rows of the new
// range are moved out of it first, in the same transaction.
//
// Dropping a partition needs ACCESS EXCLUSIVE on the parent in PostgreSQL
// 15 whatever the way: DROP TABLE and DETACH both take it, and DETACH
// CONCURRENTLY is refused while a default partition exists. It is held
// for a catalog change of milliseconds, once a day per table.
//
// Every statement that waits for a lock gives up after [Params.LockTimeout]
// (lock_timeout), so a long transaction elsewhere never queues the hot
// path behind maintenance for longer than that; the step is reported in
// Busy and tried again on the next tick.
//
// Concurrent runs (two reconcile replicas) are safe: each step takes a
// transaction-scoped advisory lock per table and schema, then reads the
// catalog again, so a partition another run created or dropped meanwhile
// is left alone.
package retention
