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
			id, err := createUntilAccepted(ctx, client, w.apiURL, apiKey, key, body)
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

func createUntilAccepted(ctx context.Context, client *http.Client, apiURL, apiKey, key string, body []byte) (string, error) {
	deadline := time.Now().Add(acceptTimeout)
	var last string
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, apiURL+"/v1/generations", bytes.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err == nil {
			var got struct {
				TaskID string `json:"task_id"`
				Error  struct{ Code, Message string }
			}
			_ = json.NewDecoder(resp.Body).Decode(&got)
			_ = resp.Body.Close()
			switch {
			case (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK) && got.TaskID != "":
				return got.TaskID, nil
			case resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests:
				return "", fmt.Errorf("the API refused it: %d %s: %s", resp.StatusCode, got.Error.Code, got.Error.Message)
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, got.Error.Code)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("not accepted within %s; last answer: %s", acceptTimeout, last)
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
