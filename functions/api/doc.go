// Package api is the public HTTP API of the pipeline (docs/design.md §7):
// generations, their cancellation, a server-sent event stream of task
// state changes, provider callbacks and the admin endpoint that creates
// tenants.
//
// Build one with [New], serve [Server.Handler], and run [Server.Run] for as
// long as the event stream should work: it holds the one Redis pattern
// subscription, on every tenant's channel, that feeds GET /v1/events. The
// notify stage publishes there (see package live).
//
// # Guarantees
//
// POST /v1/generations does everything in one transaction: the task (with
// its timeline row and task.state.changed event), the credit reservation,
// and the generation.submit.requested event. Either all of it commits or
// none of it does; a 402 leaves nothing behind, so the same
// Idempotency-Key may be sent again after a top-up.
//
// The same tenant, Idempotency-Key and request (compared by a SHA-256 of a
// canonical encoding of the validated request, so key order, whitespace and
// explicit defaults do not matter) is the same task: the first call answers
// 202, every repeat 200 with the task's current state and the header
// Idempotent-Replayed: true. Concurrent repeats make one task and one
// reservation. The same key with a different request is 409.
//
// A tenant never sees another tenant's data: every read is filtered by the
// tenant of the API key, and another tenant's task is a 404 identical to a
// task that does not exist.
//
// GET /v1/events delivers, while a stream stays open, every state change of
// the tenant's tasks that the notify stage publishes after the stream's
// response headers were sent, and only the tenant's own. A task's changes
// arrive in version order: the task.state.changed topic is FIFO per task,
// and one notify consumer at a time handles a task's message group. A
// change may arrive more than once, because the notify stage runs at least
// once per event; a repeat has the same id (<task_id>:<version>) and
// event_id, so clients drop any change whose version is not above the last
// one they saw of that task. Changes of different tasks have no order
// between them.
//
// It is a live view, not a log: there is no replay, and a stream that
// closes (the client was too slow, the server's Redis subscription failed,
// the server stopped) may have missed changes. Clients reconnect and read
// the tasks they care about with GET /v1/generations/{id}. Publishing never
// waits for a stream, so a slow or absent client never slows the chain.
//
// GET /v1/generations/{id} reports, for a task in PROVIDER_RUNNING, the
// larger of the progress the poll stage last recorded in Redis and the
// stored one, which it merges into PostgreSQL by PROGRESS_MERGE_STEP or
// PROGRESS_MERGE_INTERVAL; the stored progress alone when Redis has none
// (after a Redis restart, say) or does not answer. It never goes back to 0
// for a task that had progressed.
//
// # Errors
//
// Every error is JSON, {"error": {"code": "...", "message": "..."}}: the
// code is for machines and stable, the message says what to change. No
// stack trace and no other tenant's data ever appears in one.
//
// # Logging
//
// Request logs carry the route pattern, status, duration, request id and
// tenant id. Prompts, API keys and presigned URLs are never logged.
package api
