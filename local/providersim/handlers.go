package providersim

import (
	"encoding/base64"
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// get is GET /v1/predictions/{id}.
func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	j := s.replicateJobLocked(r.PathValue("id"))
	var view wirePrediction
	if j != nil {
		view = s.viewLocked(j, now)
	}
	s.mu.Unlock()
	if j == nil {
		writeProblem(w, http.StatusNotFound, "", "Not found.")
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// cancelJob stops a running job; a finished one is returned unchanged.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var hook *delivery
	s.mu.Lock()
	j := s.replicateJobLocked(r.PathValue("id"))
	var view wirePrediction
	if j != nil {
		if status, _ := j.state(now); !terminal(status) {
			j.canceledAt = now
			s.saveLocked(stateRecord{Job: j.record()})
			if j.webhook != "" && !j.notified {
				j.notified = true
				d := s.deliveryLocked(j, now)
				hook = &d
			}
		}
		view = s.viewLocked(j, now)
	}
	s.mu.Unlock()
	if j == nil {
		writeProblem(w, http.StatusNotFound, "", "Not found.")
		return
	}
	if hook != nil {
		s.enqueue(*hook)
	}
	writeJSON(w, http.StatusOK, view)
}

// list pages through predictions newest first, with Replicate's
// created_after filter and an opaque cursor in the next link.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var after time.Time
	if v := q.Get("created_after"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeProblem(w, http.StatusBadRequest, "Invalid created_after", "created_after must be an ISO 8601 date-time")
			return
		}
		after = t
	}
	before := int64(math.MaxInt64)
	if v := q.Get("cursor"); v != "" {
		raw, err := base64.RawURLEncoding.DecodeString(v)
		n, perr := strconv.ParseInt(string(raw), 10, 64)
		if err != nil || perr != nil {
			writeProblem(w, http.StatusBadRequest, "Invalid cursor", "the cursor is not one this API gave")
			return
		}
		before = n
	}
	now := time.Now()
	s.mu.Lock()
	var picked []*job
	for _, j := range s.jobs {
		if j.format == FormatReplicate && j.seq < before && !j.createdAt.Before(after) {
			picked = append(picked, j)
		}
	}
	slices.SortFunc(picked, func(a, b *job) int { return int(b.seq - a.seq) })
	more := len(picked) > s.opts.PageSize
	picked = picked[:min(len(picked), s.opts.PageSize)]
	results := make([]wirePrediction, len(picked))
	for i, j := range picked {
		results[i] = s.viewLocked(j, now)
	}
	s.mu.Unlock()

	var next *string
	if more {
		nq := url.Values{"cursor": {base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(picked[len(picked)-1].seq, 10)))}}
		if v := q.Get("created_after"); v != "" {
			nq.Set("created_after", v)
		}
		link := s.baseURL + "/v1/predictions?" + nq.Encode()
		next = &link
	}
	writeJSON(w, http.StatusOK, map[string]any{"previous": nil, "next": next, "results": results})
}

// replicateJobLocked returns the prediction with id, or nil: a Runway
// task is no prediction.
func (s *Server) replicateJobLocked(id string) *job {
	if j := s.jobs[id]; j != nil && j.format == FormatReplicate {
		return j
	}
	return nil
}

// secret is GET /v1/webhooks/default/secret.
func (s *Server) secret(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"key": s.opts.WebhookSecret})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeProblem answers an error the way Replicate does: a detail, and for
// most errors a title and status too.
func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	body := map[string]any{"detail": detail}
	if title != "" {
		body["title"], body["status"] = title, status
	}
	writeJSON(w, status, body)
}

// clientRequestID reads the client's marker from a webhook URL.
func clientRequestID(webhook, param string) string {
	if webhook == "" {
		return ""
	}
	u, err := url.Parse(webhook)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(u.Query().Get(param))
}
