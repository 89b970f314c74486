// Package providersim is the provider simulator of docs/design.md §8: a real
// HTTP server on its own port that speaks Replicate's predictions API and
// Runway's tasks API, so the replicate and runway clients run against it
// with only their base URL changed. Only local/ and tests import it. One
// server serves both formats; a job belongs to the format that created it
// and is served only there.
//
// # What it serves
//
//   - POST /v1/predictions (with "version") and
//     POST /v1/models/{owner}/{name}/predictions: start a job, 201 with
//     the prediction. Like Replicate, which documents no idempotency key,
//     it ignores Idempotency-Key: every create is a new job, and the
//     counts per key in /sim/stats show each resend. With
//     [Options.HonorIdempotencyKey] it behaves as a provider that honours
//     the key would: a repeat with the same request returns the same job
//     (Idempotent-Replayed: true), one with another request is a 422.
//   - GET /v1/predictions/{id}, POST /v1/predictions/{id}/cancel, and
//     GET /v1/predictions?created_after=…, newest first, with an absolute
//     "next" cursor link.
//   - GET /v1/webhooks/default/secret: the "whsec_" signing secret.
//   - Runway: POST /v1/text_to_video {model, promptText, ratio, duration},
//     200 with {"id": "<uuid>"}; GET /v1/tasks/{id} with status THROTTLED,
//     PENDING, RUNNING (progress 0..1), SUCCEEDED (output, one signed URL
//     whose _jwt carries exp), FAILED (failure, failureCode) or CANCELLED;
//     DELETE /v1/tasks/{id}, 204, cancels an unfinished task and deletes a
//     finished one. Every Runway request must carry X-Runway-Version
//     ([Options.RunwayVersion]), or it is a 400. Runway takes no
//     idempotency key and the simulator honours none: each create is a
//     task. Errors are {"error": "..."}.
//   - GET /files/{id}/output.mp4: the output, a real H.264 + AAC MP4 of 1–2
//     seconds made by ffmpeg at the requested aspect ratio, scaled down.
//     Each distinct clip is made once and cached on disk. 404 until it is
//     ready; once expired 410 for a prediction, 403 for a Runway task (a
//     signed URL past its life).
//   - GET /sim/stats: [Stats], the remote jobs created per format, per
//     idempotency key, per client request id and per prompt, and the
//     faults injected.
//
// A job is a schedule, not a goroutine: starting, then processing, then
// succeeded or failed at its end time unless canceled. When it was created
// with a webhook, a bounded pool of workers POSTs the final prediction,
// signed the Standard Webhooks way, with bounded retries.
//
// # Fault knobs
//
// [Options] holds them; [Options.LoadEnv] reads them from the environment
// and [Options.RegisterFlags] from flags: 429 with Retry-After, 503, a
// submit whose job is created but whose answer is dropped (closed or left
// hanging), job duration, failed jobs, an output that is not ready for a
// while after success, output expiry, the most jobs kept, and the seed of
// every random choice, in both formats; content-policy refusals at create
// and jobs failing for content (Replicate's E005, Runway's SAFETY.* codes);
// and Runway's THROTTLED phase for tasks created above a concurrency limit
// (PROVIDERSIM_THROTTLE_ABOVE, PROVIDERSIM_THROTTLE_FOR).
//
// Two prompt markers make a moderation outcome certain for tests, in
// either format: a prompt containing "sim:content_rejected_at_submit"
// ([MarkerContentRejectedAtSubmit]) is refused at create, and one
// containing "sim:content_rejected_output" ([MarkerContentRejectedOutput])
// fails its job for content at its end.
//
// # Lifecycle
//
// [New] checks the options and finds ffmpeg; [Server.Start] listens and
// starts the scheduler and the webhook workers; [Server.Close] stops them
// all and waits. Jobs live in memory, at most [Options.MaxJobs] of them;
// with [Options.StateFile] they, and the counts of jobs per key, are also
// kept in a file and outlive the process: a job that ran when it died
// finishes on its schedule after the restart, and its webhook is sent then.
// Runway tasks are kept the same way.
package providersim
