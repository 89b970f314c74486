package providersim

import (
	"maps"
	"net/http"
)

// maxTrackedKeys bounds the per-key counts; keys past it are only totalled.
const maxTrackedKeys = 100_000

// Stats is what GET /sim/stats answers: how many remote jobs each
// idempotency key, each client request id and each prompt started, in
// both wire formats, and how often each fault fired. A key with a count
// above one is a duplicate generation.
type Stats struct {
	// JobsCreated counts the jobs of both formats.
	JobsCreated int `json:"jobs_created"`
	// JobsCreatedByFormat splits JobsCreated by wire format:
	// [FormatReplicate] and [FormatRunway].
	JobsCreatedByFormat   map[string]int `json:"jobs_created_by_format"`
	JobsByIdempotencyKey  map[string]int `json:"jobs_by_idempotency_key"`
	JobsByClientRequestID map[string]int `json:"jobs_by_client_request_id"`
	// JobsByPrompt counts jobs per prompt text across both formats. Runway
	// carries neither an idempotency key nor a client request id, so a
	// test that gives every task its own prompt counts duplicates here,
	// also across simulators (sum the maps).
	JobsByPrompt map[string]int `json:"jobs_by_prompt"`
	// UntrackedKeys counts jobs whose key arrived after maxTrackedKeys.
	UntrackedKeys int `json:"untracked_keys"`
	// IdempotentReplays counts submits answered with an existing job.
	IdempotentReplays int          `json:"idempotent_replays"`
	Faults            FaultStats   `json:"faults"`
	Webhooks          WebhookStats `json:"webhooks"`
}

// FaultStats counts injected faults and the outcomes they cause.
type FaultStats struct {
	RateLimited    int `json:"rate_limited"`
	ServerErrors   int `json:"server_errors"`
	Dropped        int `json:"dropped"`
	FailedJobs     int `json:"failed_jobs"`
	OutputNotReady int `json:"output_not_ready"`
	OutputExpired  int `json:"output_expired"`
	// Capacity counts submits refused because MaxJobs jobs were running.
	Capacity int `json:"capacity"`
	// ContentRejectedAtSubmit counts creates refused for content policy.
	ContentRejectedAtSubmit int `json:"content_rejected_at_submit"`
	// ContentFailedJobs counts jobs made to fail for content policy; they
	// are not in FailedJobs.
	ContentFailedJobs int `json:"content_failed_jobs"`
	// Throttled counts Runway tasks that started THROTTLED.
	Throttled int `json:"throttled"`
}

// WebhookStats counts webhook deliveries.
type WebhookStats struct {
	Delivered int `json:"delivered"`
	Retried   int `json:"retried"`
	Failed    int `json:"failed"`
	// Dropped counts webhooks that found the queue full.
	Dropped int `json:"dropped"`
}

func newStats() Stats {
	return Stats{JobsCreatedByFormat: map[string]int{}, JobsByIdempotencyKey: map[string]int{}, JobsByClientRequestID: map[string]int{}, JobsByPrompt: map[string]int{}}
}

// countLocked counts a new job of format under its keys.
func (st *Stats) countLocked(format, idemKey, clientRequestID, prompt string) {
	st.JobsCreated++
	st.JobsCreatedByFormat[format]++
	st.trackLocked(st.JobsByIdempotencyKey, idemKey)
	st.trackLocked(st.JobsByClientRequestID, clientRequestID)
	st.trackLocked(st.JobsByPrompt, prompt)
}

func (st *Stats) trackLocked(counts map[string]int, key string) {
	switch {
	case key == "":
	case counts[key] > 0 || len(counts) < maxTrackedKeys:
		counts[key]++
	default:
		st.UntrackedKeys++
	}
}

// Stats returns a copy of the counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.JobsByIdempotencyKey = maps.Clone(s.stats.JobsByIdempotencyKey)
	st.JobsByClientRequestID = maps.Clone(s.stats.JobsByClientRequestID)
	st.JobsCreatedByFormat = maps.Clone(s.stats.JobsCreatedByFormat)
	st.JobsByPrompt = maps.Clone(s.stats.JobsByPrompt)
	return st
}

func (s *Server) statsHandler(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}
