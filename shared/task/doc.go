// Package task is the generation task's state machine (docs/design.md §5): the
// states, which transitions are legal, [Apply], the one way a task changes
// state, and which states each stage acts on ([FetchActs] and the like),
// the one rule both the stages and the replay preview decide with.
//
// # Guarantees
//
// Every transition is a compare-and-set on the task's version inside the
// caller's transaction:
//
//	UPDATE generation_tasks SET status = $to, version = version + 1, ...
//	WHERE task_id = $1 AND status IN (...) AND version = $n
//
// in the same transaction it appends a task_events row and writes a
// task.state.changed event (FIFO per task) plus the caller's downstream
// events to the outbox. Zero rows updated is [ErrStale]: another delivery
// moved the task first. The caller re-reads and decides; it never retries
// blindly.
//
// A transition announces nothing itself: clients watching live learn of it
// from its task.state.changed event, which the notify stage pushes to them
// once the relay has published it.
//
// A transition the state machine does not allow (say SUCCEEDED to
// SUBMITTING) is refused before touching the database, with
// [ErrIllegalTransition]: it is a bug in the caller, not a race.
package task
