// Package media runs ffprobe and ffmpeg for the pipeline's probe and
// transcode stages: [Tool.Probe] describes a media file, and
// [Tool.ProxyH264], [Tool.Thumbnail] and [Tool.Waveform] make its
// derivatives. [ParseProbe] is the pure parser behind Probe.
//
// # Where to call it
//
// Every call starts a child process that reads media, often over the network
// from a presigned S3 URL, and may run for minutes. Never call it inside a
// database transaction (docs/design.md §6): persist the attempt, commit, call,
// record the result in a new transaction. Give ctx the deadline the stage can
// afford; when it has none, [DefaultProbeTimeout] or [DefaultDeriveTimeout]
// applies. When ctx ends the child is killed and the error wraps ctx's error.
//
// # Guarantees
//
// The calls are idempotent, so a redelivered job can run again: the same
// input gives an equivalent result, and a derivative's output path holds
// either the complete new file or whatever it held before, never a partial
// file (ffmpeg writes beside it and the file is renamed into place).
//
// Inputs are local paths or http(s) URLs and nothing else: ffmpeg may open
// only local files for a local input and only http(s) for a URL, and an
// input is never read as a command-line option. Errors never contain a URL's
// query string, so they are safe to log and to store even when the input
// was a presigned URL.
//
// # Errors
//
// A tool that ran and failed returns an [*ExitError] holding the end of its
// stderr. [ErrNoMediaStreams], [ErrNoVideo], [ErrNoAudio],
// [ErrInvalidProbe] and [ErrUnsupportedInput] describe the input and are
// permanent: the same bytes fail the same way on every delivery.
//
// # CPU accounting
//
// Each child's user and system time is counted by tool and operation,
// whatever its outcome: [CPUTotals] in process, [Collectors] for
// Prometheus. It is the media side of a stage's CPU; the process's own CPU
// (getrusage RUSAGE_SELF) leaves the children out.
//
// Tests make real clips with the mediatest package.
package media
