package runway

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aivedio/pipeline/shared/provider"
)

// task is Runway's task object, as GET /v1/tasks/{id} answers it.
type task struct {
	ID          string   `json:"id"`
	Status      string   `json:"status"`
	CreatedAt   string   `json:"createdAt"`
	Progress    *float64 `json:"progress"`
	Output      []string `json:"output"`
	Failure     string   `json:"failure"`
	FailureCode string   `json:"failureCode"`
}

var statuses = map[string]provider.Status{
	"PENDING":   provider.StatusQueued,
	"THROTTLED": provider.StatusQueued,
	"RUNNING":   provider.StatusRunning,
	"SUCCEEDED": provider.StatusSucceeded,
	"FAILED":    provider.StatusFailed,
	"CANCELLED": provider.StatusCanceled,
}

// decodeTask reads one task object.
func decodeTask(body []byte) (task, error) {
	var t task
	if err := json.Unmarshal(body, &t); err != nil {
		return t, fmt.Errorf("decode task: %w", err)
	}
	if t.ID == "" {
		return t, errors.New("task has no id")
	}
	return t, nil
}

// job turns a task into the pipeline's view of it. answered is when the
// answer came, from which an output URL's life is counted when the URL
// does not say; retention is that life.
func (t task) job(answered time.Time, retention time.Duration) (provider.Job, error) {
	status, ok := statuses[t.Status]
	if !ok {
		return provider.Job{}, fmt.Errorf("task has unknown status %q", provider.Shorten(t.Status, 32))
	}
	created, err := time.Parse(time.RFC3339Nano, t.CreatedAt)
	if err != nil {
		return provider.Job{}, errors.New("task has no valid createdAt")
	}
	j := provider.Job{ID: t.ID, Status: status, CreatedAt: created, Throttled: t.Status == "THROTTLED"}
	switch status {
	case provider.StatusRunning:
		if t.Progress != nil {
			j.Progress = int(min(max(*t.Progress, 0), 1) * 100)
		}
	case provider.StatusSucceeded:
		j.Progress = 100
		if len(t.Output) == 0 {
			return provider.Job{}, errors.New("succeeded task has no output")
		}
		u, err := url.Parse(t.Output[0])
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return provider.Job{}, errors.New("task output is not an http(s) URL")
		}
		j.OutputURL = t.Output[0]
		j.OutputExpiresAt = outputExpiry(u, answered, retention)
	case provider.StatusFailed:
		j.ErrorCode = t.FailureCode
		if j.ErrorCode == "" {
			j.ErrorCode = ErrorCodeFailed
		}
		j.ContentRejected = IsModerationCode(t.FailureCode)
		j.ErrorMessage = provider.Shorten(t.Failure, 1000)
		if j.ErrorMessage == "" {
			j.ErrorMessage = "task failed"
		}
	}
	return j, nil
}

// outputExpiry is when an output URL stops working. Runway's URLs are
// signed with a JWT in the _jwt query parameter whose exp claim is that
// moment; it is read without checking the signature (only Runway's CDN
// can), and when it cannot be read the documented lower bound applies.
func outputExpiry(u *url.URL, answered time.Time, retention time.Duration) time.Time {
	fallback := answered.Add(retention)
	parts := strings.Split(u.Query().Get("_jwt"), ".")
	if len(parts) != 3 {
		return fallback
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return fallback
	}
	var claims struct {
		Exp *int64 `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil || claims.Exp == nil || *claims.Exp <= 0 {
		return fallback
	}
	return time.Unix(*claims.Exp, 0)
}
