package providersim

import (
	"container/heap"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"time"
)

// createRequest is the body of both create endpoints.
type createRequest struct {
	Version             string          `json:"version"`
	Input               json.RawMessage `json:"input"`
	Webhook             string          `json:"webhook"`
	WebhookEventsFilter []string        `json:"webhook_events_filter"`
}

var (
	versionRef = regexp.MustCompile(`^(?:[A-Za-z0-9._-]+/[A-Za-z0-9._-]+:)?([0-9a-f]{64})$`)
	hookEvents = []string{"start", "output", "logs", "completed"}
)

// create starts a prediction, or returns the one an earlier request with
// the same Idempotency-Key started.
func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return // the client went away
	}
	if len(body) > 1<<20 {
		writeProblem(w, http.StatusRequestEntityTooLarge, "Request too large", "the body is over 1 MiB")
		return
	}
	var req createRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeProblem(w, http.StatusBadRequest, "Invalid JSON", "the body is not a JSON object")
		return
	}
	model, version := "", "hidden"
	if owner := r.PathValue("owner"); owner != "" {
		model = owner + "/" + r.PathValue("name")
	} else {
		m := versionRef.FindStringSubmatch(req.Version)
		if m == nil {
			writeProblem(w, http.StatusUnprocessableEntity, "Invalid version", "version must be a 64-character version id")
			return
		}
		model, version = "sim/model", m[1]
	}
	var input map[string]json.RawMessage
	if json.Unmarshal(req.Input, &input) != nil || input == nil {
		writeProblem(w, http.StatusUnprocessableEntity, "Invalid input", "input must be an object")
		return
	}
	if req.Webhook != "" {
		if u, err := url.Parse(req.Webhook); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			writeProblem(w, http.StatusUnprocessableEntity, "Invalid webhook", "webhook must be an absolute http(s) URL")
			return
		}
	}
	for _, ev := range req.WebhookEventsFilter {
		if !slices.Contains(hookEvents, ev) {
			writeProblem(w, http.StatusUnprocessableEntity, "Invalid webhook_events_filter", "events are start, output, logs and completed")
			return
		}
	}
	key := r.Header.Get("Idempotency-Key")
	hash := sha256.Sum256(append([]byte(r.URL.Path+"\n"), body...))
	now := time.Now()

	s.mu.Lock()
	j, replay := s.byKey[key]
	switch {
	case replay && j.reqHash != hash:
		s.mu.Unlock()
		writeProblem(w, http.StatusUnprocessableEntity, "Idempotency key reused", "this Idempotency-Key was used with a different request")
		return
	case replay:
		s.stats.IdempotentReplays++
	case len(s.jobs) >= s.opts.MaxJobs && !s.evictLocked(now):
		s.stats.Faults.Capacity++
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusTooManyRequests, "", "Too many predictions running. Your rate limit resets in ~1s.")
		return
	default:
		j = s.newJobLocked(now, model, version, req, input, key, hash)
	}
	drop := s.rollLocked(s.opts.RateDrop)
	if drop {
		s.stats.Faults.Dropped++
	}
	view := s.viewLocked(j, now)
	s.mu.Unlock()

	if drop {
		s.drop(w, r)
		return
	}
	if replay {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, view)
}

// newJobLocked records a new job and schedules its webhook.
func (s *Server) newJobLocked(now time.Time, model, version string, req createRequest, input map[string]json.RawMessage, key string, hash [32]byte) *job {
	s.seq++
	span := s.opts.JobDurationMax - s.opts.JobDurationMin
	run := s.opts.JobDurationMin
	if span > 0 {
		run += time.Duration(s.rng.Int64N(int64(span) + 1))
	}
	j := &job{
		seq:       s.seq,
		id:        s.newIDLocked(),
		model:     model,
		version:   version,
		input:     req.Input,
		webhook:   req.Webhook,
		filter:    req.WebhookEventsFilter,
		idemKey:   key,
		reqHash:   hash,
		createdAt: now,
		startAt:   now.Add(run / 5),
		doneAt:    now.Add(run),
		fail:      s.rollLocked(s.opts.RateFail),
	}
	j.width, j.height, j.seconds = outputShape(input, s.opts.MaxOutputSide)
	s.jobs[j.id] = j
	s.saveLocked(stateRecord{Job: j.record()})
	if key != "" {
		s.byKey[key] = j
	}
	if j.fail {
		s.stats.Faults.FailedJobs++
	}
	s.stats.countLocked(key, clientRequestID(j.webhook, s.opts.ClientRequestIDParam))
	if j.webhook != "" {
		heap.Push(&s.due, dueItem{at: j.doneAt, id: j.id})
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return j
}

// evictLocked drops the oldest finished job to make room.
func (s *Server) evictLocked(now time.Time) bool {
	var oldest *job
	for _, j := range s.jobs {
		if status, _ := j.state(now); terminal(status) && (oldest == nil || j.seq < oldest.seq) {
			oldest = j
		}
	}
	if oldest == nil {
		return false
	}
	delete(s.jobs, oldest.id)
	if s.byKey[oldest.idemKey] == oldest {
		delete(s.byKey, oldest.idemKey)
	}
	s.saveLocked(stateRecord{Evict: oldest.id})
	return true
}

// newIDLocked makes a Replicate-looking id: 26 base32 letters. They come
// from crypto/rand, not the seeded source: the seed repeats the faults of a
// run, but a job id is an identity, and one a restarted simulator hands out
// again would be taken by the pipeline for the job of an earlier run.
func (s *Server) newIDLocked() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	for {
		var b [26]byte
		_, _ = rand.Read(b[:]) // never fails (crypto/rand)
		for i := range b {
			b[i] = alphabet[int(b[i])%len(alphabet)]
		}
		if id := string(b[:]); s.jobs[id] == nil {
			return id
		}
	}
}

// drop answers nothing: the job exists, the caller never learns it.
func (s *Server) drop(w http.ResponseWriter, r *http.Request) {
	if s.opts.DropMode == DropHang {
		<-r.Context().Done() // the client gave up, or the simulator closed
	}
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection unanswered
	}
	_ = conn.Close()
}
