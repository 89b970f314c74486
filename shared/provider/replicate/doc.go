// Package replicate is the [provider.Client] for Replicate's predictions
// API (https://replicate.com/docs/reference/http). The local provider
// simulator (local/providersim) speaks the same wire format, so this client
// runs against either one; only [Config.BaseURL] changes.
//
// # Wire format
//
//   - Submit: POST /v1/models/{owner}/{name}/predictions for a model name,
//     or POST /v1/predictions with "version" for a pinned version
//     ("owner/name:<64 hex>" or the bare id). Body {input, webhook,
//     webhook_events_filter: ["completed"]}; 201 with the prediction.
//   - Get: GET /v1/predictions/{id}. Cancel: POST /v1/predictions/{id}/cancel,
//     which answers with the prediction (an empty 2xx body is followed by a
//     Get).
//   - Find: GET /v1/predictions?created_after=<RFC 3339>, newest first, 100
//     a page, following the absolute "next" cursor URL.
//   - Status values starting, processing, succeeded, failed and canceled map
//     to queued, running, succeeded, failed and canceled; anything else is
//     [provider.ClassMalformed].
//   - Output is a URL string, a list of them (the first is taken) or an
//     object with a "video" URL. Replicate removes API predictions' inputs,
//     outputs and files an hour after they finish ("data_removed": true,
//     "output": null), so [provider.Job.OutputExpiresAt] is completed_at plus
//     [Config.OutputRetention].
//   - Callbacks are Standard Webhooks: webhook-id, webhook-timestamp and
//     webhook-signature ("v1,<base64 HMAC-SHA256 of id.timestamp.body>",
//     space separated), keyed by the base64 part of a "whsec_" secret. The
//     body is the prediction, as Get returns it.
//
// # What the API lacks, and how this client covers it
//
// Replicate documents no idempotency key. Submit still sends the attempt's
// key as an Idempotency-Key header, which costs nothing (the simulator
// honours it only when asked to), but a repeated submit can start a second
// prediction. The client is therefore not a [provider.Deduper]: the
// pipeline never resubmits a submit that may have acted (an answer lost, a
// 5xx, a process killed mid-call) without asking FindByClientRequestID
// first.
//
// Replicate has no client request id either. Submit carries ours as the
// query parameter [ClientRequestIDParam] of the webhook URL, which Replicate
// stores and returns in the prediction's "webhook" field (its docs suggest
// query parameters on the webhook URL for exactly this kind of metadata).
// FindByClientRequestID lists the predictions created since the attempt
// began and matches on that parameter. It answers [provider.ClassNotFound]
// only when it is sure: a prediction in the window that came from the API
// with no webhook at all may be the lost one (it was submitted without a
// callback URL), so such a window is refused as [provider.ClassRejected]
// with Code [CodeLookupAmbiguous] instead of risking a duplicate
// generation. Run with a callback URL, and give the pipeline an API token
// of its own, to keep lookups exact.
//
// # Errors
//
// Every failure is a [*provider.Error]. 429 is rate limited, with the wait
// taken from Retry-After (seconds or an HTTP date) or, failing that, from
// Replicate's "resets in ~30s" detail. 5xx, 408 and any failure before the
// request was fully written are unavailable. A failure after a submit was
// written, including a lost 2xx body, is timeout-unknown; the same failure
// on a read or a cancel is unavailable, as repeating those is harmless. 404
// is not found, other 4xx rejected, except a 4xx whose detail carries
// Replicate's sensitive-content code [CodeSensitive] (E005), which is
// content rejected. A prediction that failed with that code is a failed job
// with [provider.Job.ContentRejected] set and ErrorCode E005; the code is
// matched as a code of its own, never the wording around it. A body that is not the documented
// format malformed. A malformed answer to Submit means a prediction was
// probably created: reconcile it like timeout-unknown.
//
// Errors and logs never hold a prompt, the API token or an output URL.
// Messages quoted from the provider are shortened and have the prompt cut
// out.
package replicate
