package providersim

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// job is one simulated prediction. Its state is a function of the clock:
// starting until startAt, processing until doneAt, then failed or
// succeeded, unless canceled first. Nothing runs while a job "runs".
type job struct {
	seq        int64
	id         string
	model      string
	version    string
	input      json.RawMessage
	webhook    string
	filter     []string
	idemKey    string
	reqHash    [32]byte
	createdAt  time.Time
	startAt    time.Time
	doneAt     time.Time
	fail       bool
	canceledAt time.Time
	notified   bool // its completion webhook is queued
	hooked     bool // its completion webhook was sent, or given up on

	width, height, seconds int

	// format is the wire format the job was created in, and the only one
	// that serves it: FormatReplicate or FormatRunway.
	format string
	// prompt is the request's prompt, for Stats.JobsByPrompt.
	prompt string
	// contentFail makes the job end failed for content policy.
	contentFail bool
	// throttledUntil is when a Runway task leaves THROTTLED; zero when it
	// never was.
	throttledUntil time.Time
}

func terminal(status string) bool {
	return status == "succeeded" || status == "failed" || status == "canceled"
}

// state returns the job's status at now and, when terminal, when it ended.
func (j *job) state(now time.Time) (string, time.Time) {
	switch {
	case !j.canceledAt.IsZero():
		return "canceled", j.canceledAt
	case !now.Before(j.doneAt) && (j.fail || j.contentFail):
		return "failed", j.doneAt
	case !now.Before(j.doneAt):
		return "succeeded", j.doneAt
	case !now.Before(j.startAt):
		return "processing", time.Time{}
	}
	return "starting", time.Time{}
}

// wirePrediction is Replicate's prediction object, as the simulator
// answers it.
type wirePrediction struct {
	ID                  string            `json:"id"`
	Model               string            `json:"model"`
	Version             string            `json:"version"`
	Input               json.RawMessage   `json:"input"`
	Logs                string            `json:"logs"`
	Output              *string           `json:"output"`
	DataRemoved         bool              `json:"data_removed"`
	Error               *string           `json:"error"`
	Status              string            `json:"status"`
	CreatedAt           string            `json:"created_at"`
	StartedAt           *string           `json:"started_at"`
	CompletedAt         *string           `json:"completed_at"`
	Source              string            `json:"source"`
	Metrics             map[string]any    `json:"metrics"`
	URLs                map[string]string `json:"urls"`
	Webhook             *string           `json:"webhook"`
	WebhookEventsFilter []string          `json:"webhook_events_filter,omitempty"`
}

// viewLocked renders j as the API shows it at now.
func (s *Server) viewLocked(j *job, now time.Time) wirePrediction {
	status, ended := j.state(now)
	p := wirePrediction{
		ID:                  j.id,
		Model:               j.model,
		Version:             j.version,
		Input:               j.input,
		Status:              status,
		CreatedAt:           stamp(j.createdAt),
		Source:              "api",
		Metrics:             map[string]any{},
		URLs:                map[string]string{"get": s.baseURL + "/v1/predictions/" + j.id, "cancel": s.baseURL + "/v1/predictions/" + j.id + "/cancel"},
		WebhookEventsFilter: j.filter,
	}
	if j.webhook != "" {
		p.Webhook = &j.webhook
	}
	if status != "starting" && !(status == "canceled" && j.canceledAt.Before(j.startAt)) {
		started := stamp(j.startAt)
		p.StartedAt = &started
	}
	if terminal(status) {
		done := stamp(ended)
		p.CompletedAt = &done
		p.Metrics["predict_time"] = ended.Sub(j.startAt).Seconds()
	}
	switch status {
	case "processing":
		p.Logs = "Generating video\n" + progressBar(int(100*now.Sub(j.startAt)/max(j.doneAt.Sub(j.startAt), 1)))
	case "succeeded":
		p.Logs = "Generating video\n" + progressBar(100)
		out := s.baseURL + "/files/" + j.id + "/output.mp4"
		p.Output = &out
	case "failed":
		msg := "simulated failure: the model could not render this video"
		if j.contentFail {
			msg = "The input or output was flagged as sensitive. Please try again with different inputs. (E005)"
		}
		p.Error = &msg
		p.Logs = "Generating video\n" + msg
	}
	if terminal(status) && !now.Before(ended.Add(s.opts.OutputTTL)) {
		// Replicate removes an API prediction's input, output and logs.
		p.DataRemoved, p.Output, p.Logs, p.Input = true, nil, "", json.RawMessage("{}")
	}
	return p
}

// progressBar draws a tqdm line, the format Replicate models log.
func progressBar(pct int) string {
	pct = min(max(pct, 0), 100)
	return fmt.Sprintf("%3d%%|%-20s| %d/100", pct, strings.Repeat("█", pct/5), pct)
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// outputShape reads the requested size and length from a model input and
// shrinks them to what the simulator renders: at most maxSide pixels a
// side (even, for H.264) and 1–2 seconds.
func outputShape(input map[string]json.RawMessage, maxSide int) (width, height, seconds int) {
	width, height, seconds = 1280, 720, 1
	var res string
	if json.Unmarshal(input["resolution"], &res) == nil {
		if w, h, ok := parseResolution(res); ok {
			width, height = w, h
		}
	}
	var d float64
	if json.Unmarshal(input["duration"], &d) == nil {
		seconds = clipSeconds(d)
	}
	width, height = shrink(width, height, maxSide)
	return width, height, seconds
}

// clipSeconds is how long the simulator's clip for a requested duration
// is: 2 seconds for 2 and more, else 1; ffmpeg is slow on small machines.
func clipSeconds(requested float64) int {
	if requested >= 2 {
		return 2
	}
	return 1
}

// shrink scales width×height down to at most maxSide a side, keeping the
// aspect ratio, and makes both even, as H.264 needs.
func shrink(width, height, maxSide int) (int, int) {
	if width > maxSide || height > maxSide {
		if width >= height {
			width, height = maxSide, height*maxSide/width
		} else {
			width, height = width*maxSide/height, maxSide
		}
	}
	return max(width&^1, 2), max(height&^1, 2)
}

// parseResolution reads "WIDTHxHEIGHT" or the "720p" shorthand.
func parseResolution(s string) (int, int, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	if p, ok := strings.CutSuffix(s, "p"); ok {
		if h, err := strconv.Atoi(p); err == nil && h >= 16 && h <= 4320 {
			return h * 16 / 9, h, true
		}
		return 0, 0, false
	}
	ws, hs, ok := strings.Cut(s, "x")
	if !ok {
		return 0, 0, false
	}
	w, errW := strconv.Atoi(ws)
	h, errH := strconv.Atoi(hs)
	if errW != nil || errH != nil || w < 16 || h < 16 || w > 8192 || h > 8192 {
		return 0, 0, false
	}
	return w, h, true
}
