package replicate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// ClientRequestIDParam is the webhook URL query parameter that carries
// [provider.SubmitRequest.ClientRequestID] through Replicate and back.
const ClientRequestIDParam = "aivedio_client_request_id"

// ErrorCodeFailed is the [provider.Job] ErrorCode of a failed prediction:
// Replicate gives a message but no code.
const ErrorCodeFailed = "prediction_failed"

// CodeSensitive is Replicate's error code for an input or output its
// safety checks flagged as sensitive ("E005 ... flagged as sensitive";
// its error codes page gives codes as E followed by digits, within the
// error text). A prediction that failed with it, or a create refused
// with it, is a content-policy refusal: never retried, never sent to
// another provider.
const CodeSensitive = "E005"

// sensitiveCode finds CodeSensitive as a code of its own in a message,
// "E005: ..." or "... (E005)", and not inside another token such as E0050.
var sensitiveCode = regexp.MustCompile(`(?:^|[^A-Za-z0-9])` + CodeSensitive + `(?:$|[^A-Za-z0-9])`)

// flaggedSensitive reports whether a Replicate error text carries
// [CodeSensitive].
func flaggedSensitive(text string) bool { return sensitiveCode.MatchString(text) }

// prediction is the part of Replicate's prediction object the client reads.
// Input is never decoded: it holds the prompt.
type prediction struct {
	ID          string          `json:"id"`
	Status      string          `json:"status"`
	Output      json.RawMessage `json:"output"`
	Error       json.RawMessage `json:"error"`
	Logs        *string         `json:"logs"`
	CreatedAt   string          `json:"created_at"`
	CompletedAt *string         `json:"completed_at"`
	DataRemoved bool            `json:"data_removed"`
	Source      string          `json:"source"`
	// Webhook is raw so an absent field (nil) differs from null.
	Webhook json.RawMessage `json:"webhook"`
}

// page is one page of GET /v1/predictions.
type page struct {
	Next    *string           `json:"next"`
	Results []json.RawMessage `json:"results"`
}

var statuses = map[string]provider.Status{
	"starting":   provider.StatusQueued,
	"processing": provider.StatusRunning,
	"succeeded":  provider.StatusSucceeded,
	"failed":     provider.StatusFailed,
	"canceled":   provider.StatusCanceled,
}

// decodePrediction reads one prediction object.
func decodePrediction(body []byte) (prediction, error) {
	var p prediction
	if err := json.Unmarshal(body, &p); err != nil {
		return p, fmt.Errorf("decode prediction: %w", err)
	}
	if p.ID == "" {
		return p, errors.New("prediction has no id")
	}
	return p, nil
}

// job turns a prediction into the pipeline's view of it. retention is how
// long outputs live after completion.
func (p prediction) job(retention time.Duration) (provider.Job, error) {
	status, ok := statuses[p.Status]
	if !ok {
		return provider.Job{}, fmt.Errorf("prediction has unknown status %q", provider.Shorten(p.Status, 32))
	}
	created, err := time.Parse(time.RFC3339Nano, p.CreatedAt)
	if err != nil {
		return provider.Job{}, errors.New("prediction has no valid created_at")
	}
	j := provider.Job{
		ID:        p.ID,
		Status:    status,
		CreatedAt: created,
	}
	j.ClientRequestID, _ = p.marker()

	finished := created
	if p.CompletedAt != nil {
		if t, err := time.Parse(time.RFC3339Nano, *p.CompletedAt); err == nil {
			finished = t
		}
	}
	out, err := outputURL(p.Output)
	switch {
	case err != nil && status == provider.StatusSucceeded:
		return provider.Job{}, err
	case out == "" && status == provider.StatusSucceeded && !p.DataRemoved:
		return provider.Job{}, errors.New("succeeded prediction has no output")
	case err == nil && out != "":
		j.OutputURL = out
	}
	if status.Terminal() {
		j.OutputExpiresAt = finished.Add(retention)
		if p.DataRemoved {
			j.OutputURL = ""
			j.OutputExpiresAt = finished
		}
	}

	switch status {
	case provider.StatusSucceeded:
		j.Progress = 100
	case provider.StatusRunning:
		j.Progress = logProgress(p.Logs)
	case provider.StatusFailed:
		j.ErrorCode = ErrorCodeFailed
		j.ErrorMessage = errorText(p.Error)
		if flaggedSensitive(j.ErrorMessage) {
			j.ErrorCode, j.ContentRejected = CodeSensitive, true
		}
		if j.ErrorMessage == "" {
			j.ErrorMessage = "prediction failed"
		}
	}
	return j, nil
}

// marker returns the client request id carried in the webhook URL. known
// is false when the webhook field is absent from the object, which happens
// in shortened list entries.
func (p prediction) marker() (id string, known bool) {
	if p.Webhook == nil {
		return "", false
	}
	var hook *string
	if json.Unmarshal(p.Webhook, &hook) != nil || hook == nil || *hook == "" {
		return "", true
	}
	u, err := url.Parse(*hook)
	if err != nil {
		return "", true
	}
	return u.Query().Get(ClientRequestIDParam), true
}

// hasWebhook reports whether the prediction was created with any webhook.
func (p prediction) hasWebhook() bool {
	var hook *string
	return p.Webhook != nil && json.Unmarshal(p.Webhook, &hook) == nil && hook != nil && *hook != ""
}

// outputURL finds the video in a prediction's output: a URL string, a list
// whose first entry is one, or an object with a "video" URL.
func outputURL(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("decode output: %w", err)
		}
	case '[':
		var list []json.RawMessage
		if err := json.Unmarshal(raw, &list); err != nil {
			return "", fmt.Errorf("decode output: %w", err)
		}
		if len(list) == 0 {
			return "", nil
		}
		return outputURL(list[0])
	case '{':
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", fmt.Errorf("decode output: %w", err)
		}
		v, ok := obj["video"]
		if !ok {
			return "", errors.New("output object has no video")
		}
		return outputURL(v)
	default:
		return "", errors.New("output is not a URL")
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return "", errors.New("output is not an http(s) URL")
	}
	return s, nil
}

// errorText renders a prediction's error, a string or any JSON value.
func errorText(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return provider.Shorten(s, 1000)
	}
	return provider.Shorten(string(raw), 1000)
}

// tqdmLine matches the progress bars models print: " 76%|███▋  | 76/100".
var tqdmLine = regexp.MustCompile(`^\s*(\d{1,3})%\s*\|`)

// logProgress returns the last progress percentage in a model's logs.
func logProgress(logs *string) int {
	if logs == nil {
		return 0
	}
	lines := strings.Split(*logs, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		// tqdm redraws with carriage returns; the last redraw counts.
		line := lines[i]
		if k := strings.LastIndexByte(line, '\r'); k >= 0 {
			line = line[k+1:]
		}
		if m := tqdmLine.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			return min(n, 100)
		}
	}
	return 0
}
