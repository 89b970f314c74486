// Package reviewsim is a content moderation endpoint for local runs and
// tests: the reviewer the review stage (functions/review) calls. It speaks
// the stage's HTTP contract from the reviewer's side, written here
// independently so that a drift between the two fails a test:
//
//   - POST /review: the body {task_id, tenant_id, asset_id, attempt,
//     frames: [{url, at_seconds}], expires_at} must carry a valid
//     X-Aivedio-Signature (sha256=<hex HMAC-SHA256 of the body>), else 401.
//     The simulator fetches every frame URL (proving the presigned URLs
//     work) and checks each is a JPEG, else 422. Then it answers by the
//     task's script if a test set one, else by its knobs: 503, 429 with
//     Retry-After, a malformed 200, or {decision: approve|reject,
//     reason_code, labels, reviewer}.
//   - Down refuses every review request: the connection is closed with no
//     answer.
//   - GET /sim/stats: counts of what it answered. POST /sim/script
//     {task_id, answers: [...]} queues deterministic answers for one task
//     (approve, reject[:reason], 5xx, 429, malformed, down), used in order
//     before the knobs apply; POST /sim/down?on=true|false switches Down.
package reviewsim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	neturl "net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Answers a script may queue.
const (
	Approve   = "approve"
	Reject    = "reject" // "reject:<reason_code>" names the reason
	Err5xx    = "5xx"
	Throttle  = "429"
	Malformed = "malformed"
	Refuse    = "down"
)

// Name is the reviewer the simulator names in its decisions.
const Name = "reviewsim"

// Stats are what the simulator answered.
type Stats struct {
	Requests      int `json:"requests"`
	Approved      int `json:"approved"`
	Rejected      int `json:"rejected"`
	Errors5xx     int `json:"errors_5xx"`
	Throttled     int `json:"throttled"`
	Malformed     int `json:"malformed"`
	Refused       int `json:"refused"`
	BadSignature  int `json:"bad_signature"`
	BadRequest    int `json:"bad_request"`
	FramesFetched int `json:"frames_fetched"`
	FrameFailures int `json:"frame_failures"`
	// Abandoned counts requests whose caller hung up while the simulator
	// fetched their frames.
	Abandoned int `json:"abandoned"`
	// Tasks counts the review requests per task id.
	Tasks map[string]int `json:"tasks"`
	// Decisions are the decisions the simulator answered, per task id, in
	// order: Approve or Reject (without its reason). A caller that lost an
	// answer asks again, so a task may have more than one; what the
	// pipeline recorded must be among them.
	Decisions map[string][]string `json:"decisions"`
}

// Server is one simulator.
type Server struct {
	log    *slog.Logger
	client *http.Client

	mu      sync.Mutex
	opts    Options
	rnd     *rand.Rand
	scripts map[string][]string
	stats   Stats

	srv *http.Server
	url string
}

// New returns a simulator with o's knobs.
func New(o Options, logger *slog.Logger) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	seed := uint64(o.Seed)
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &Server{log: logger, opts: o, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		scripts: map[string][]string{}, stats: Stats{Tasks: map[string]int{}, Decisions: map[string][]string{}},
		client: &http.Client{Timeout: o.FrameTimeout}}, nil
}

// Start serves on addr (host:port; port 0 picks one) until Close, and
// returns the review endpoint's URL.
func (s *Server) Start(_ context.Context, addr string) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("reviewsim listen %s: %w", addr, err)
	}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	s.url = "http://" + ln.Addr().String() + "/review"
	return s.url, nil
}

// URL is the review endpoint's URL, once started.
func (s *Server) URL() string { return s.url }

// Secret is the signing secret the simulator verifies.
func (s *Server) Secret() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Secret
}

// Options are the knobs the simulator runs with: what a check reads to
// know which faults it injects.
func (s *Server) Options() Options {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts
}

// Close stops serving.
func (s *Server) Close() error {
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.srv.Shutdown(ctx)
}

// Handler serves the review endpoint and /sim/*.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /review", s.review)
	mux.HandleFunc("GET /sim/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	mux.HandleFunc("POST /sim/script", s.script)
	mux.HandleFunc("POST /sim/down", func(w http.ResponseWriter, r *http.Request) {
		on, err := strconv.ParseBool(r.URL.Query().Get("on"))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "on must be true or false"})
			return
		}
		s.SetDown(on)
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// Stats are the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.Tasks = make(map[string]int, len(s.stats.Tasks))
	for k, v := range s.stats.Tasks {
		out.Tasks[k] = v
	}
	out.Decisions = make(map[string][]string, len(s.stats.Decisions))
	for k, v := range s.stats.Decisions {
		out.Decisions[k] = slices.Clone(v)
	}
	return out
}

// SetDown switches refusing every review request.
func (s *Server) SetDown(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Down = on
}

// Script queues answers for one task's requests, used in order before the
// knobs apply.
func (s *Server) Script(taskID string, answers ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scripts[taskID] = append(s.scripts[taskID], answers...)
}

func (s *Server) script(w http.ResponseWriter, r *http.Request) {
	var body struct {
		TaskID  string   `json:"task_id"`
		Answers []string `json:"answers"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body); err != nil || body.TaskID == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {task_id, answers}"})
		return
	}
	for _, a := range body.Answers {
		if !validAnswer(a) {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("answer %q is none of approve, reject[:reason], 5xx, 429, malformed, down", a)})
			return
		}
	}
	s.Script(body.TaskID, body.Answers...)
	w.WriteHeader(http.StatusNoContent)
}

func validAnswer(a string) bool {
	switch a {
	case Approve, Reject, Err5xx, Throttle, Malformed, Refuse:
		return true
	}
	return strings.HasPrefix(a, Reject+":")
}

// request is the review stage's request, as the reviewer reads it.
type request struct {
	TaskID    string    `json:"task_id"`
	TenantID  string    `json:"tenant_id"`
	AssetID   string    `json:"asset_id"`
	Attempt   int       `json:"attempt"`
	ExpiresAt time.Time `json:"expires_at"`
	Frames    []struct {
		URL       string  `json:"url"`
		AtSeconds float64 `json:"at_seconds"`
	} `json:"frames"`
}

func (s *Server) review(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	s.mu.Lock()
	s.stats.Requests++
	opts := s.opts
	s.mu.Unlock()
	var req request
	_ = json.Unmarshal(body, &req)
	answer := s.next(req.TaskID, opts)
	if answer == Refuse {
		s.count(func(st *Stats) { st.Refused++ })
		refuse(w)
		return
	}
	if opts.Latency > 0 {
		select {
		case <-time.After(opts.Latency):
		case <-r.Context().Done():
			return
		}
	}
	if !verify(opts.Secret, body, r.Header.Get("X-Aivedio-Signature")) {
		s.count(func(st *Stats) { st.BadSignature++ })
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "X-Aivedio-Signature is not the HMAC-SHA256 of the body under the shared secret"})
		return
	}
	if err := json.Unmarshal(body, &req); err != nil || req.TaskID == "" || len(req.Frames) == 0 || req.ExpiresAt.IsZero() {
		s.count(func(st *Stats) { st.BadRequest++ })
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "want {task_id, tenant_id, asset_id, frames: [{url, at_seconds}], expires_at}"})
		return
	}
	s.count(func(st *Stats) { st.Tasks[req.TaskID]++ })
	for i, f := range req.Frames {
		if err := s.fetch(r.Context(), f.URL); err != nil {
			if r.Context().Err() != nil {
				// The caller gave up (its own timeout): that says
				// nothing about the URL.
				s.count(func(st *Stats) { st.Abandoned++ })
				return
			}
			s.count(func(st *Stats) { st.FrameFailures++ })
			s.log.Warn("frame URL did not serve a JPEG", slog.String("task_id", req.TaskID), slog.Int("frame", i), slog.String("error", err.Error()))
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": fmt.Sprintf("frame %d: %s", i, err)})
			return
		}
		s.count(func(st *Stats) { st.FramesFetched++ })
	}
	switch {
	case answer == Err5xx:
		s.count(func(st *Stats) { st.Errors5xx++ })
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "reviewsim: simulated outage"})
	case answer == Throttle:
		s.count(func(st *Stats) { st.Throttled++ })
		w.Header().Set("Retry-After", strconv.Itoa(int(opts.RetryAfter.Seconds())))
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": "reviewsim: slow down"})
	case answer == Malformed:
		s.count(func(st *Stats) { st.Malformed++ })
		writeJSON(w, http.StatusOK, map[string]string{"verdict": "looks fine"})
	case answer == Approve:
		s.count(func(st *Stats) {
			st.Approved++
			st.Decisions[req.TaskID] = append(st.Decisions[req.TaskID], Approve)
		})
		writeJSON(w, http.StatusOK, map[string]any{"decision": "approve", "reviewer": Name})
	default: // reject[:reason]
		reason := strings.TrimPrefix(strings.TrimPrefix(answer, Reject), ":")
		if reason == "" {
			reason = "policy.violence"
		}
		s.count(func(st *Stats) {
			st.Rejected++
			st.Decisions[req.TaskID] = append(st.Decisions[req.TaskID], Reject)
		})
		writeJSON(w, http.StatusOK, map[string]any{"decision": "reject", "reason_code": reason, "labels": []string{"simulated"}, "reviewer": Name})
	}
}

// next is the answer to the task's request: its script's next, else
// Down, else the knobs' roll.
func (s *Server) next(taskID string, o Options) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q := s.scripts[taskID]; len(q) > 0 {
		s.scripts[taskID] = q[1:]
		return q[0]
	}
	if o.Down {
		return Refuse
	}
	x := s.rnd.Float64()
	for _, c := range []struct {
		rate   float64
		answer string
	}{{o.Rate5xx, Err5xx}, {o.Rate429, Throttle}, {o.RateMalformed, Malformed}, {o.RejectRate, Reject}} {
		if x < c.rate {
			return c.answer
		}
		x -= c.rate
	}
	return Approve
}

func (s *Server) count(fn func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn(&s.stats)
}

// fetch GETs one frame URL and checks it is a JPEG.
func (s *Server) fetch(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := s.client.Do(req)
	var uerr *neturl.Error
	if errors.As(err, &uerr) {
		return uerr.Err // without the URL: a presigned URL is a credential, never logged
	}
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	head, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if !bytes.HasPrefix(head, []byte{0xff, 0xd8, 0xff}) {
		return errors.New("not a JPEG")
	}
	return nil
}

// refuse closes the connection without an answer: to the caller, the
// reviewer is down.
func refuse(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // a reset, like a refused connection
	}
	_ = conn.Close()
}

// verify checks the signature header of body, in constant time.
func verify(secret string, body []byte, header string) bool {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	return hmac.Equal([]byte(want), []byte(header))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
