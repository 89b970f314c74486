package providersim

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The wire formats the simulator speaks, as [Stats.JobsCreatedByFormat]
// names them.
const (
	FormatReplicate = "replicate"
	FormatRunway    = "runway"
)

// Prompt markers that make the outcome of one request certain, for tests;
// the rates of [Options] do the same at random.
const (
	// MarkerContentRejectedAtSubmit in a prompt makes the create refused
	// for content policy, in either format; no job is made.
	MarkerContentRejectedAtSubmit = "sim:content_rejected_at_submit"
	// MarkerContentRejectedOutput in a prompt makes the job fail for
	// content policy at its end, as if the output was moderated.
	MarkerContentRejectedOutput = "sim:content_rejected_output"
)

// The failure codes the simulator's Runway tasks end with, from Runway's
// task failures page.
const (
	runwayCodeInputText   = "SAFETY.INPUT.TEXT"
	runwayCodeOutputVideo = "SAFETY.OUTPUT.VIDEO"
	runwayCodeInternal    = "INTERNAL"
)

// runwayCreate is the body of POST /v1/text_to_video.
type runwayCreate struct {
	Model      string `json:"model"`
	PromptText string `json:"promptText"`
	Ratio      string `json:"ratio"`
	Duration   *int   `json:"duration"`
}

// createTask is POST /v1/text_to_video. Runway takes no idempotency key,
// and neither does the simulator: every accepted create is a new task.
func (s *Server) createTask(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20+1))
	if err != nil {
		return // the client went away
	}
	var req runwayCreate
	switch {
	case len(body) > 1<<20:
		writeRunwayError(w, http.StatusRequestEntityTooLarge, "the body is over 1 MiB", "")
		return
	case json.Unmarshal(body, &req) != nil:
		writeRunwayError(w, http.StatusBadRequest, "the body is not a JSON object", "")
		return
	}
	width, height, ok := parseRunwayRatio(req.Ratio)
	var problems []string
	if req.Model == "" {
		problems = append(problems, "model: required")
	}
	if strings.TrimSpace(req.PromptText) == "" || len([]rune(req.PromptText)) > 1000 {
		problems = append(problems, "promptText: a non-empty string up to 1000 characters")
	}
	if !ok {
		problems = append(problems, "ratio: WIDTH:HEIGHT in pixels")
	}
	seconds := 5
	if req.Duration != nil {
		seconds = *req.Duration
	}
	if seconds < 1 || seconds > 60 {
		problems = append(problems, "duration: whole seconds from 1 to 60")
	}
	if len(problems) > 0 {
		writeRunwayError(w, http.StatusBadRequest, "Validation of body failed: "+strings.Join(problems, "; "), "")
		return
	}
	width, height = shrink(width, height, s.opts.MaxOutputSide)
	now := time.Now()

	s.mu.Lock()
	if s.refuseContentLocked(req.PromptText) {
		s.mu.Unlock()
		writeRunwayError(w, http.StatusBadRequest, "The prompt was flagged by content moderation.", runwayCodeInputText)
		return
	}
	if len(s.jobs) >= s.opts.MaxJobs && !s.evictLocked(now) {
		s.stats.Faults.Capacity++
		s.mu.Unlock()
		writeRunwayError(w, http.StatusTooManyRequests, "You have too many tasks; try again later.", "")
		return
	}
	j := s.newJobLocked(now, jobSpec{format: FormatRunway, model: req.Model, input: body, prompt: req.PromptText,
		width: width, height: height, seconds: clipSeconds(float64(seconds))})
	drop := s.rollLocked(s.opts.RateDrop)
	if drop {
		s.stats.Faults.Dropped++
	}
	s.mu.Unlock()

	if drop {
		s.drop(w, r)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": j.id})
}

// getTask is GET /v1/tasks/{id}.
func (s *Server) getTask(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	j := s.jobs[r.PathValue("id")]
	var view wireTask
	found := j != nil && j.format == FormatRunway
	if found {
		view = s.taskViewLocked(j, now)
	}
	s.mu.Unlock()
	if !found {
		writeRunwayError(w, http.StatusNotFound, "Task not found", "")
		return
	}
	writeJSON(w, http.StatusOK, view)
}

// deleteTask is DELETE /v1/tasks/{id}: Runway cancels a task that has not
// finished and deletes one that has.
func (s *Server) deleteTask(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	j := s.jobs[r.PathValue("id")]
	found := j != nil && j.format == FormatRunway
	if found {
		if status, _ := j.state(now); terminal(status) {
			s.removeLocked(j)
		} else {
			j.canceledAt = now
			s.saveLocked(stateRecord{Job: j.record()})
		}
	}
	s.mu.Unlock()
	if !found {
		writeRunwayError(w, http.StatusNotFound, "Task not found", "")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// wireTask is Runway's task object, as the simulator answers it.
type wireTask struct {
	ID          string   `json:"id"`
	Status      string   `json:"status"`
	CreatedAt   string   `json:"createdAt"`
	Progress    *float64 `json:"progress,omitempty"`
	Output      []string `json:"output,omitempty"`
	Failure     string   `json:"failure,omitempty"`
	FailureCode string   `json:"failureCode,omitempty"`
}

// taskViewLocked renders j as Runway shows it at now.
func (s *Server) taskViewLocked(j *job, now time.Time) wireTask {
	status, ended := j.state(now)
	t := wireTask{ID: j.id, CreatedAt: stamp(j.createdAt)}
	switch status {
	case "starting":
		t.Status = "PENDING"
		if now.Before(j.throttledUntil) {
			t.Status = "THROTTLED"
		}
	case "processing":
		t.Status = "RUNNING"
		p := float64(now.Sub(j.startAt)) / float64(max(j.doneAt.Sub(j.startAt), 1))
		p = min(max(p, 0), 1)
		t.Progress = &p
	case "succeeded":
		t.Status = "SUCCEEDED"
		t.Output = []string{s.baseURL + "/files/" + j.id + "/output.mp4?_jwt=" + s.outputToken(j.id, ended.Add(s.opts.OutputTTL))}
	case "failed":
		t.Status = "FAILED"
		t.Failure, t.FailureCode = "simulated failure: the model could not render this video", runwayCodeInternal
		if j.contentFail {
			t.Failure, t.FailureCode = "The output was rejected by content moderation.", runwayCodeOutputVideo
		}
	case "canceled":
		t.Status = "CANCELLED"
	}
	return t
}

// outputToken signs an output URL the way Runway's CDN URLs are: a JWT
// whose exp claim is when the URL stops working. The file handler decides
// on the job's own schedule; the token is there for the client to read.
func (s *Server) outputToken(id string, exp time.Time) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	// exp is whole seconds, rounded up so that it is never before the
	// moment the file stops being served.
	secs := (exp.UnixNano() + int64(time.Second) - 1) / int64(time.Second)
	claims := enc.EncodeToString(fmt.Appendf(nil, `{"sub":%q,"exp":%d}`, id, secs))
	mac := hmac.New(sha256.New, s.hookKey)
	mac.Write([]byte(head + "." + claims))
	return head + "." + claims + "." + enc.EncodeToString(mac.Sum(nil))
}

// writeRunwayError answers an error the way Runway does: an "error"
// member with a human-readable explanation, and for a moderation refusal
// its failure code.
func writeRunwayError(w http.ResponseWriter, status int, msg, failureCode string) {
	body := map[string]string{"error": msg}
	if failureCode != "" {
		body["failureCode"] = failureCode
	}
	writeJSON(w, status, body)
}

// parseRunwayRatio reads Runway's "1280:720".
func parseRunwayRatio(ratio string) (width, height int, ok bool) {
	ws, hs, found := strings.Cut(ratio, ":")
	w, errW := strconv.Atoi(ws)
	h, errH := strconv.Atoi(hs)
	if !found || errW != nil || errH != nil || w < 16 || h < 16 || w > 8192 || h > 8192 {
		return 0, 0, false
	}
	return w, h, true
}
