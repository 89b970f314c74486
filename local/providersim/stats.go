package providersim

import (
	"maps"
	"net/http"
)

// maxTrackedKeys bounds the per-key counts; keys past it are only totalled.
const maxTrackedKeys = 100_000

// Stats is what GET /sim/stats answers: how many remote jobs each
// idempotency key and each client request id started, and how often each
// fault fired. A key with a count above one is a duplicate generation.
type Stats struct {
	JobsCreated           int            `json:"jobs_created"`
	JobsByIdempotencyKey  map[string]int `json:"jobs_by_idempotency_key"`
	JobsByClientRequestID map[string]int `json:"jobs_by_client_request_id"`
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
	return Stats{JobsByIdempotencyKey: map[string]int{}, JobsByClientRequestID: map[string]int{}}
}

// countLocked counts a new job under its keys.
func (st *Stats) countLocked(idemKey, clientRequestID string) {
	st.JobsCreated++
	st.trackLocked(st.JobsByIdempotencyKey, idemKey)
	st.trackLocked(st.JobsByClientRequestID, clientRequestID)
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
	return st
}

func (s *Server) statsHandler(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}
