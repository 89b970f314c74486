// Package runway is the [provider.Client] for Runway's developer API, the
// tasks API at https://api.dev.runwayml.com. The local provider simulator
// (local/providersim) speaks the same wire format, so this client runs
// against either one; only [Config.BaseURL] changes.
//
// # Sources
//
// Written from Runway's public documentation at https://docs.dev.runwayml.com/:
//
//   - API reference, https://docs.dev.runwayml.com/api/ (POST
//     /v1/text_to_video, GET and DELETE /v1/tasks/{id}, the
//     X-Runway-Version header), and the request and task types of Runway's
//     SDKs, which are generated from that OpenAPI description
//     (runwayml/sdk-python: text_to_video_create_params.py,
//     task_retrieve_response.py); the models, ratios and durations of
//     [Client.Supports] come from there.
//   - API errors, https://docs.dev.runwayml.com/api-details/errors (which
//     statuses may be retried).
//   - Task failures, https://docs.dev.runwayml.com/api-details/task-failures
//     (failureCode values; SAFETY.* and INPUT_PREPROCESSING.SAFETY.* are
//     moderation and must not be retried).
//   - Usage tiers and limits, https://docs.dev.runwayml.com/usage/tiers
//     (THROTTLED tasks wait for the organisation's concurrency limit; 429
//     when the daily generation limit is reached).
//   - Outputs, https://docs.dev.runwayml.com/assets/outputs (output URLs
//     are signed and expire within 24–48 hours).
//
// # Wire format
//
//   - Every request carries "Authorization: Bearer <key>" and
//     "X-Runway-Version: <version>" ([DefaultAPIVersion]).
//   - Submit: POST /v1/text_to_video with {model, promptText, ratio,
//     duration}; the answer is {"id": "<uuid>"} and nothing else, so the
//     job Submit returns is queued, with our client request id filled in.
//     Our "1280x720" resolution becomes Runway's ratio "1280:720" (its
//     ratios are pixel sizes).
//   - Get: GET /v1/tasks/{id}: {id, status, createdAt, progress (0..1),
//     output (array of URLs), failure, failureCode}. PENDING and THROTTLED
//     map to queued (THROTTLED sets [provider.Job.Throttled]), RUNNING to
//     running, SUCCEEDED, FAILED and CANCELLED to their like; anything else
//     is [provider.ClassMalformed].
//   - Cancel: DELETE /v1/tasks/{id}, 204. Runway cancels a task that has
//     not finished and deletes one that has, output included; Cancel
//     therefore reads the task first and sends no DELETE for a finished one.
//
// # What the API lacks, and how this client covers it
//
// Runway documents no idempotency key. A create whose answer is lost, or
// answered 500, 502 or 504, may have started a task, and a second create
// would start another paid generation: those are
// [provider.ClassTimeoutUnknown]. Only a 503 (Runway shedding load before
// it took the request) or a failure before the request was written is
// [provider.ClassUnavailable], safe to send again.
//
// Runway cannot find a task by anything of ours either: there is no list
// endpoint and a task echoes no metadata. FindByClientRequestID therefore
// always answers [provider.ClassRejected] with Code [CodeLookupUnsupported]:
// to the reconciler that is "cannot tell", never "not found", so it never
// resubmits; it hands the task to a person at once (NEEDS_ATTENTION,
// reconcile.submit_unknown), since no later round could tell either. And
// since no resend can be deduplicated, the client is not a
// [provider.Deduper]: the submit stage looks up, rather than sends again,
// any create that may have started a task.
//
// Runway sends no callbacks: its create requests have no webhook field.
// The pipeline polls Runway tasks; [provider.SubmitRequest.CallbackURL] is
// ignored and ParseCallback refuses everything.
//
// # Errors
//
// Every failure is a [*provider.Error]. 429 is rate limited, with the wait
// from Retry-After. Runway documents its moderation as task failure codes,
// not as a create error; a 400 to a create whose body still names a
// moderation code (failureCode or code, SAFETY.* or
// INPUT_PREPROCESSING.SAFETY.*, as the simulator answers) is
// [provider.ClassContentRejected], decided by the code and never by the
// message text. Other 4xx are rejected,
// but 404 on a task is not found. A task that failed with a moderation
// failureCode is a failed job with [provider.Job.ContentRejected] set and
// the code in ErrorCode. An answer that is not the documented format is
// malformed; after a create that means a task probably exists, and the
// pipeline reconciles it like timeout-unknown.
//
// Errors and logs never hold a prompt, the API key or an output URL.
package runway
