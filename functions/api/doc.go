// Package api is the public HTTP API of the pipeline (DESIGN.md §7):
// generations, their cancellation, a server-sent event stream of task
// state changes, provider callbacks and the admin endpoint that creates
// tenants.
//
// Build one with [New], serve [Server.Handler], and run [Server.Run] for as
// long as the event stream should work: it holds the PostgreSQL LISTEN
// connection that feeds GET /v1/events.
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
// the tenant's tasks committed after the stream's response headers were
// sent, in commit order, hence in version order per task. It is a live view,
// not a log: there is no replay, and a stream that closes (the client was
// too slow, the server's database listener reconnected, the server stopped)
// may have missed changes. Clients reconnect and read the tasks they care
// about with GET /v1/generations/{id}. The task's version orders changes;
// drop any change whose version is not above the last one seen.
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
