package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// startLoad submits the run's generations over four fifths of the fault
// window, round robin over the tenants, each under an idempotency key of
// its own. A create that gets no answer (the API was killed, PostgreSQL
// restarted, the API shed it) is sent again under the same key until it is
// accepted: the key makes it one task however often it is sent. The
// channel yields nil once every generation is accepted.
func (w *world) startLoad(ctx context.Context) <-chan error {
	out := make(chan error, 1)
	spread := w.o.Faults * 4 / 5
	gap := spread / time.Duration(max(w.o.N, 1))
	go func() {
		client := &http.Client{Timeout: 10 * time.Second}
		for i := range w.o.N {
			key := fmt.Sprintf("chaos-%d-%d", w.o.Seed, i)
			apiKey := w.keys[i%len(w.keys)]
			body, _ := json.Marshal(map[string]any{"model": model, "prompt": fmt.Sprintf("chaos generation %d", i),
				"duration_seconds": 4, "resolution": "1280x720"})
			id, err := sendUntilAccepted(ctx, client, w.apiURL, apiKey, apiCall{path: "/v1/generations", key: key, body: body, id: "task_id"})
			if err != nil {
				out <- fmt.Errorf("generation %d: %w", i, err)
				return
			}
			w.mu.Lock()
			w.tasks[key] = id
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				out <- ctx.Err()
				return
			case <-time.After(gap):
			}
		}
		out <- nil
	}()
	return out
}

// acceptTimeout bounds how long one create may keep failing: longer than
// any fault the run injects lasts.
const acceptTimeout = 3 * time.Minute

// apiCall is one create the load sends until the API accepts it.
type apiCall struct {
	path string // where it is POSTed
	key  string // its Idempotency-Key; "" sends none
	body []byte
	id   string // the answer's field that names what was made (task_id, render_id, ...)
}

// sendUntilAccepted POSTs c until the API accepts it (a 2xx naming what
// was made) and returns that id. No answer, a 5xx or a 429 (the API was
// killed, PostgreSQL restarted, the API shed it) is sent again after half
// a second; any other 4xx is a refusal and an error.
func sendUntilAccepted(ctx context.Context, client *http.Client, apiURL, apiKey string, c apiCall) (string, error) {
	deadline := time.Now().Add(acceptTimeout)
	var last string
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+c.path, bytes.NewReader(c.body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			var got map[string]json.RawMessage
			_ = json.NewDecoder(resp.Body).Decode(&got)
			_ = resp.Body.Close()
			var id string
			_ = json.Unmarshal(got[c.id], &id)
			var apiErr struct{ Code, Message string }
			_ = json.Unmarshal(got["error"], &apiErr)
			switch {
			case resp.StatusCode/100 == 2 && id != "":
				return id, nil
			case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
				return "", fmt.Errorf("the API refused POST %s: %d %s: %s", c.path, resp.StatusCode, apiErr.Code, apiErr.Message)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, apiErr.Code)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("POST %s not accepted within %s; last answer: %s", c.path, acceptTimeout, last)
}

// taskIDs are the tasks the run created.
func (w *world) taskIDs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.tasks))
	for _, id := range w.tasks {
		out = append(out, id)
	}
	return out
}
