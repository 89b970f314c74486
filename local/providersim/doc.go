// Package providersim is the provider simulator of DESIGN.md §8: a real
// HTTP server on its own port that speaks Replicate's predictions API, so
// the replicate client runs against it with only its base URL changed.
// Only local/ and tests import it.
//
// # What it serves
//
//   - POST /v1/predictions (with "version") and
//     POST /v1/models/{owner}/{name}/predictions: start a job, 201 with
//     the prediction. A repeated Idempotency-Key with the same request
//     returns the same job (Replicate documents no such key; the simulator
//     behaves as a provider that honours it would), with another request
//     422.
//   - GET /v1/predictions/{id}, POST /v1/predictions/{id}/cancel, and
//     GET /v1/predictions?created_after=…, newest first, with an absolute
//     "next" cursor link.
//   - GET /v1/webhooks/default/secret: the "whsec_" signing secret.
//   - GET /files/{id}/output.mp4: the output, a real H.264 + AAC MP4 of 1–2
//     seconds made by ffmpeg at the requested aspect ratio, scaled down.
//     Each distinct clip is made once and cached on disk.
//   - GET /sim/stats: [Stats], the remote jobs created per idempotency key
//     and per client request id, and the faults injected.
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
// while after success, output expiry, and the seed of every random choice.
//
// # Lifecycle
//
// [New] checks the options and finds ffmpeg; [Server.Start] listens and
// starts the scheduler and the webhook workers; [Server.Close] stops them
// all and waits. Jobs live in memory, at most [Options.MaxJobs] of them;
// with [Options.StateFile] they, and the counts of jobs per key, are also
// kept in a file and outlive the process: a job that ran when it died
// finishes on its schedule after the restart, and its webhook is sent then.
package providersim
