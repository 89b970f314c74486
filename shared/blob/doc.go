// Package blob stores every media byte of the pipeline in S3-compatible object
// storage (aws-sdk-go-v2). Rows in PostgreSQL hold the facts about a media
// object (its key, size and sha256 in `assets`); this package holds the bytes.
//
// # Guarantees
//
//   - Keys are deterministic. [Key] builds
//     `tenants/<tenant>/tasks/<task>/<kind>/<name>` from ids alone, so a stage
//     that runs twice for the same message (at-least-once delivery) writes the
//     same key again and overwrites its earlier bytes instead of leaving a
//     duplicate. [Store.Put] is therefore safe to repeat; [Store.Delete] is
//     idempotent too.
//   - Bodies are streamed. [Store.Put] never holds a whole body in memory: it
//     reads at most [PartSize] bytes ahead and hands larger bodies to the SDK's
//     transfer manager, which uploads [PartSize] parts with bounded
//     concurrency. The buffers of one Put stay below about
//     (uploadConcurrency + 3) × [PartSize] (56 MiB) whatever the body
//     length. [Store.Open] streams the download.
//   - A Put either leaves the complete new object or no new object: a body
//     that fails to read, or whose length differs from [PutOpts.Size], aborts
//     the multipart upload. Only a process killed mid-upload leaves parts
//     behind (never an object); give the bucket a lifecycle rule with
//     AbortIncompleteMultipartUpload to reclaim them.
//   - Presigned URLs are short-lived. [Store.PresignGet] refuses a lifetime
//     over [MaxPresignTTL]; URLs go to clients, never into events or rows.
//   - A missing object is [ErrNotFound] (test with errors.Is).
//
// # Checksums
//
// [Object.SHA256] is the hex sha256 of the whole body, computed while
// streaming. It is always returned by Put, and Put records it on the object as
// user metadata `x-amz-meta-sha256` so that [Store.Stat] and [Store.Open]
// report it as well. The sha256 is known only after the last byte was read,
// while S3 takes metadata when an upload starts, so Put records it in one of
// two ways:
//
//   - Bodies up to [PartSize] are read ahead, hashed, and sent in one
//     PutObject carrying the metadata and `x-amz-checksum-sha256`: the server
//     verifies the whole-object digest itself and the object never exists
//     without its metadata.
//   - Larger bodies go up as a multipart upload (each part CRC-checked by the
//     server), then Put copies the object onto itself (CopyObject,
//     MetadataDirective REPLACE) to attach the metadata. The copy is guarded
//     by x-amz-copy-source-if-match on the upload's ETag, so when a
//     concurrent Put replaced the object meanwhile, this Put fails instead
//     of labelling the other writer's bytes with its digest. Between the
//     upload and the copy the object briefly exists without metadata; Stat
//     then reports an empty SHA256. AWS S3 rewrites the object server-side
//     for the copy (no bytes pass through the client; it takes time in
//     proportion to the size); versitygw only rewrites its metadata. The
//     copy asks for no new server checksum:
//     versitygw v1.8.0 stores the checksum of zero bytes when an in-place
//     copy changes the algorithm.
//
// S3's own multipart SHA256 checksum is deliberately not used as the object's
// digest: for multipart uploads S3 only offers a COMPOSITE SHA256 (a digest of
// the part digests, suffixed `-N`), which is not the sha256 of the bytes and
// changes with the part size. Objects over 5 GiB cannot be copied in one
// request, so for them the digest lives only in the returned [Object]; the
// caller persists it (it does anyway, in `assets.checksum`).
//
// # Deadlines
//
// Every method takes the caller's context; callers set the deadline. The
// context given to [Store.Open] must stay live while the body is read.
package blob
