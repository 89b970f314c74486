package providersim

import (
	"container/heap"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
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

// create starts a prediction. With Options.HonorIdempotencyKey, it returns
// the one an earlier request with the same Idempotency-Key started instead;
// without (as Replicate), every create is a new job.
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
	var prompt string
	_ = json.Unmarshal(input["prompt"], &prompt)

	s.mu.Lock()
	j, replay := s.byKey[key]
	if !s.opts.HonorIdempotencyKey {
		j, replay = nil, false // as Replicate: the header means nothing
	}
	switch {
	case !replay && s.refuseContentLocked(prompt):
		s.mu.Unlock()
		// Replicate's safety check: the code E005 in the detail.
		writeProblem(w, http.StatusUnprocessableEntity, "Input flagged as sensitive", "E005: The input was flagged as sensitive. Please try again with different inputs.")
		return
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
		width, height, seconds := outputShape(input, s.opts.MaxOutputSide)
		j = s.newJobLocked(now, jobSpec{format: FormatReplicate, model: model, version: version, input: req.Input, webhook: req.Webhook,
			filter: req.WebhookEventsFilter, idemKey: key, reqHash: hash, prompt: prompt, width: width, height: height, seconds: seconds})
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

// jobSpec is what a create asks for, in either wire format.
type jobSpec struct {
	format  string
	model   string
	version string
	input   json.RawMessage
	webhook string
	filter  []string
	idemKey string
	reqHash [32]byte
	prompt  string
	// width, height and seconds are the clip's shape, already shrunk.
	width, height, seconds int
}

// newJobLocked records a new job and schedules its webhook.
func (s *Server) newJobLocked(now time.Time, spec jobSpec) *job {
	s.seq++
	span := s.opts.JobDurationMax - s.opts.JobDurationMin
	run := s.opts.JobDurationMin
	if span > 0 {
		run += time.Duration(s.rng.Int64N(int64(span) + 1))
	}
	j := &job{
		seq:       s.seq,
		id:        s.newIDLocked(spec.format),
		format:    spec.format,
		model:     spec.model,
		version:   spec.version,
		input:     spec.input,
		webhook:   spec.webhook,
		filter:    spec.filter,
		idemKey:   spec.idemKey,
		reqHash:   spec.reqHash,
		prompt:    spec.prompt,
		createdAt: now,
		startAt:   now.Add(run / 5),
		doneAt:    now.Add(run),
		fail:      s.rollLocked(s.opts.RateFail),
		width:     spec.width,
		height:    spec.height,
		seconds:   spec.seconds,
	}
	j.contentFail = strings.Contains(spec.prompt, MarkerContentRejectedOutput) || s.rollLocked(s.opts.RateContentFail)
	if spec.format == FormatRunway && s.opts.ThrottleAbove > 0 && s.unfinishedLocked(FormatRunway, now) >= s.opts.ThrottleAbove {
		// Held back for the organisation's concurrency limit: the whole
		// schedule moves by the wait.
		j.throttledUntil = now.Add(s.opts.ThrottleFor)
		j.startAt = j.startAt.Add(s.opts.ThrottleFor)
		j.doneAt = j.doneAt.Add(s.opts.ThrottleFor)
	}
	s.jobs[j.id] = j
	s.saveLocked(stateRecord{Job: j.record()})
	if spec.idemKey != "" {
		s.byKey[spec.idemKey] = j
	}
	s.countJobLocked(j)
	if j.webhook != "" {
		heap.Push(&s.due, dueItem{at: j.doneAt, id: j.id})
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return j
}

// countJobLocked counts a new job, or one replayed from the state file.
func (s *Server) countJobLocked(j *job) {
	s.stats.countLocked(j.format, j.idemKey, clientRequestID(j.webhook, s.opts.ClientRequestIDParam), j.prompt)
	switch {
	case j.contentFail:
		s.stats.Faults.ContentFailedJobs++
	case j.fail:
		s.stats.Faults.FailedJobs++
	}
	if !j.throttledUntil.IsZero() {
		s.stats.Faults.Throttled++
	}
}

// unfinishedLocked counts the jobs of format that have not ended at now.
func (s *Server) unfinishedLocked(format string, now time.Time) int {
	n := 0
	for _, j := range s.jobs {
		if status, _ := j.state(now); j.format == format && !terminal(status) {
			n++
		}
	}
	return n
}

// refuseContentLocked decides whether a create is refused for content
// policy: its prompt carries the marker, or the rate says so.
func (s *Server) refuseContentLocked(prompt string) bool {
	refuse := strings.Contains(prompt, MarkerContentRejectedAtSubmit) || s.rollLocked(s.opts.RateContentRejectSubmit)
	if refuse {
		s.stats.Faults.ContentRejectedAtSubmit++
	}
	return refuse
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
	s.removeLocked(oldest)
	return true
}

// removeLocked forgets j, in memory and in the state file.
func (s *Server) removeLocked(j *job) {
	delete(s.jobs, j.id)
	if s.byKey[j.idemKey] == j {
		delete(s.byKey, j.idemKey)
	}
	s.saveLocked(stateRecord{Evict: j.id})
}

// newIDLocked makes an id of format's look: 26 base32 letters for
// Replicate, a version 4 UUID for Runway. They come
// from crypto/rand, not the seeded source: the seed repeats the faults of a
// run, but a job id is an identity, and one a restarted simulator hands out
// again would be taken by the pipeline for the job of an earlier run.
func (s *Server) newIDLocked(format string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	for format == FormatRunway {
		var b [16]byte
		_, _ = rand.Read(b[:])
		b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
		h := hex.EncodeToString(b[:])
		if id := h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]; s.jobs[id] == nil {
			return id
		}
	}
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
