// Package drive submits generations through the public API, follows them
// to the end, and checks the pipeline's invariants against the database,
// object storage and the provider simulator. `go run ./local demo` and the
// end-to-end tests both use it, so the demo proves what the tests prove.
package drive

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Params says what to drive.
type Params struct {
	APIURL string
	Key    string
	N      int
	Models []string
	// CancelShare is the share of generations cancelled right after
	// submission (some are still QUEUED and cancel at once).
	CancelShare float64
	// Durations, when set, are the durations asked for in turn; 2 to 5 s
	// otherwise.
	Durations []int
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Progress, when set, is called with the count per state while tasks
	// run, about twice a second.
	Progress func(counts map[string]int, done, total int)
	Client   *http.Client
}

// PromptMarker starts every prompt Run sends, so a test can search logs
// for prompts that leaked.
const PromptMarker = "demo generation"

// Result is what a run saw through the API.
type Result struct {
	Tasks    []uuid.UUID
	Prompts  map[uuid.UUID]string // what each task asked for, unique to the run
	Final    map[uuid.UUID]string // terminal status per task
	Versions map[uuid.UUID]int64  // version of the terminal state per task
	Stream   map[uuid.UUID][]int64
	Canceled int // cancel requests that were accepted
	Elapsed  time.Duration
}

// terminal mirrors task.Status.Terminal for the API's strings.
func terminal(s string) bool {
	switch s {
	case "SUCCEEDED", "FAILED", "CANCELED", "CANCELED_WITH_OUTPUT", "NEEDS_ATTENTION":
		return true
	}
	return false
}

// Run submits p.N generations, listens to the tenant's event stream, and
// reads each task with GET once the stream shows it ended (or after
// getWithoutNews without that news), until every one is terminal or the
// timeout passes.
func Run(ctx context.Context, p Params) (Result, error) {
	if p.Client == nil {
		p.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if p.Timeout <= 0 {
		p.Timeout = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	start := time.Now()
	res := Result{Final: map[uuid.UUID]string{}, Versions: map[uuid.UUID]int64{}, Prompts: map[uuid.UUID]string{}}
	// Each prompt is unique, so that a provider's jobs (which need not
	// carry any key of ours) can be counted per task.
	run := uuid.NewString()[:8]

	stream, err := listen(ctx, p)
	if err != nil {
		return res, err
	}
	for i := range p.N {
		duration := 2 + i%4
		if len(p.Durations) > 0 {
			duration = p.Durations[i%len(p.Durations)]
		}
		prompt := fmt.Sprintf("%s %s-%d: a lighthouse at dusk, waves rolling in", PromptMarker, run, i)
		body := map[string]any{
			"model":            p.Models[i%len(p.Models)],
			"prompt":           prompt,
			"duration_seconds": duration,
			"resolution":       "1280x720",
		}
		key := uuid.NewString()
		id, err := create(ctx, p, key, body)
		if err != nil {
			return res, err
		}
		// A client retry with the same key must find the same task.
		again, err := create(ctx, p, key, body)
		if err != nil {
			return res, err
		}
		if again != id {
			return res, fmt.Errorf("idempotency broken: key %s gave tasks %s and %s", key, id, again)
		}
		res.Tasks = append(res.Tasks, id)
		res.Prompts[id] = prompt
		if p.CancelShare > 0 && rand.Float64() < p.CancelShare {
			if ok, err := cancelTask(ctx, p, id); err != nil {
				return res, err
			} else if ok {
				res.Canceled++
			}
		}
	}

	// A task is read with GET once the stream shows it ended, as a client
	// following the stream would, and every getWithoutNews otherwise, so
	// that a change the stream lost still ends the run.
	lastGet := map[uuid.UUID]time.Time{}
	status := map[uuid.UUID]string{}
	for _, id := range res.Tasks {
		lastGet[id] = time.Now()
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		counts := map[string]int{}
		done := 0
		for _, id := range res.Tasks {
			if s, ok := res.Final[id]; ok {
				counts[s]++
				done++
				continue
			}
			streamed, ended := stream.latest(id)
			if !ended && time.Since(lastGet[id]) < getWithoutNews {
				counts[cmp.Or(streamed, status[id], "QUEUED")]++
				continue
			}
			got, version, err := get(ctx, p, id)
			if err != nil {
				return res, err
			}
			lastGet[id], status[id] = time.Now(), got
			counts[got]++
			if terminal(got) {
				res.Final[id] = got
				res.Versions[id] = version
				done++
			}
		}
		if p.Progress != nil {
			p.Progress(counts, done, len(res.Tasks))
		}
		if done == len(res.Tasks) {
			break
		}
		select {
		case <-ctx.Done():
			var stuck []string
			for _, id := range res.Tasks {
				if _, ok := res.Final[id]; !ok {
					stuck = append(stuck, id.String())
				}
			}
			return res, fmt.Errorf("%d of %d generations still running after %s (%s): %s", len(res.Tasks)-done, len(res.Tasks), p.Timeout,
				summaryOf(counts), strings.Join(stuck, ", "))
		case <-stream.ended:
		case <-tick.C:
		}
	}
	// The last state changes may still be on their way through the relay,
	// the broker and notify: wait until the stream has every task's final
	// version (or give up after a while and let Check say what is missing).
	caughtUp := time.Now().Add(30 * time.Second)
	for time.Now().Before(caughtUp) && !stream.has(res.Versions) {
		time.Sleep(200 * time.Millisecond)
	}
	res.Stream = stream.snapshot()
	res.Elapsed = time.Since(start)
	return res, nil
}

func summaryOf(counts map[string]int) string {
	var parts []string
	for s, n := range counts {
		if !terminal(s) {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

func create(ctx context.Context, p Params, key string, body map[string]any) (uuid.UUID, error) {
	data, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.APIURL+"/v1/generations", bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+p.Key)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	var out struct {
		TaskID uuid.UUID `json:"task_id"`
	}
	if err := do(p.Client, req, &out, http.StatusOK, http.StatusAccepted); err != nil {
		return uuid.Nil, fmt.Errorf("create generation: %w", err)
	}
	return out.TaskID, nil
}

func get(ctx context.Context, p Params, id uuid.UUID) (string, int64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.APIURL+"/v1/generations/"+id.String(), nil)
	req.Header.Set("Authorization", "Bearer "+p.Key)
	var out struct {
		Status  string `json:"status"`
		Version int64  `json:"version"`
	}
	if err := do(p.Client, req, &out, http.StatusOK); err != nil {
		return "", 0, fmt.Errorf("get generation %s: %w", id, err)
	}
	return out.Status, out.Version, nil
}

// cancelTask asks to cancel; a 409 (already past cancelling) is not an error.
func cancelTask(ctx context.Context, p Params, id uuid.UUID) (bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, p.APIURL+"/v1/generations/"+id.String()+"/cancel", nil)
	req.Header.Set("Authorization", "Bearer "+p.Key)
	resp, err := p.Client.Do(req)
	if err != nil {
		return false, fmt.Errorf("cancel %s: %w", id, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	switch resp.StatusCode {
	case http.StatusOK, http.StatusAccepted:
		return true, nil
	case http.StatusConflict:
		return false, nil
	}
	return false, fmt.Errorf("cancel %s: HTTP %d", id, resp.StatusCode)
}

func do(c *http.Client, req *http.Request, out any, want ...int) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	for _, w := range want {
		if resp.StatusCode == w {
			return json.Unmarshal(data, out)
		}
	}
	return fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
}

// getWithoutNews is how long Run goes without reading a task the stream
// shows no end of.
const getWithoutNews = 5 * time.Second

// streamLog collects the versions of each task as the event stream
// delivered them, and its latest state.
type streamLog struct {
	mu       sync.Mutex
	versions map[uuid.UUID][]int64
	last     map[uuid.UUID]streamed
	// ended is signalled when a subject's stream reaches a terminal state.
	ended chan struct{}
}

// streamed is the newest state the stream showed of a subject.
type streamed struct {
	version int64
	status  string
}

// latest returns the newest state the stream showed of id, and whether it
// is terminal.
func (s *streamLog) latest(id uuid.UUID) (status string, ended bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.last[id]
	return l.status, terminal(l.status)
}

// has reports whether every task's stream reached its version.
func (s *streamLog) has(versions map[uuid.UUID]int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, v := range versions {
		if !slices.Contains(s.versions[id], v) {
			return false
		}
	}
	return true
}

func (s *streamLog) snapshot() map[uuid.UUID][]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[uuid.UUID][]int64, len(s.versions))
	for k, v := range s.versions {
		out[k] = append([]int64(nil), v...)
	}
	return out
}

// listen opens GET /v1/events and records every state change until ctx
// ends.
func listen(ctx context.Context, p Params) (*streamLog, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.APIURL+"/v1/events", nil)
	req.Header.Set("Authorization", "Bearer "+p.Key)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := (&http.Client{}).Do(req) // no timeout: the stream lives as long as ctx
	if err != nil {
		return nil, fmt.Errorf("open event stream: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("open event stream: HTTP %d", resp.StatusCode)
	}
	log := &streamLog{versions: map[uuid.UUID][]int64{}, last: map[uuid.UUID]streamed{}, ended: make(chan struct{}, 1)}
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue
			}
			var c struct {
				TaskID   uuid.UUID `json:"task_id"`
				RenderID uuid.UUID `json:"render_id"`
				Version  int64     `json:"version"`
				To       string    `json:"to"`
			}
			if json.Unmarshal([]byte(strings.TrimSpace(data)), &c) != nil {
				continue
			}
			subject := c.TaskID
			if c.RenderID != uuid.Nil {
				subject = c.RenderID
			}
			log.mu.Lock()
			log.versions[subject] = append(log.versions[subject], c.Version)
			if c.Version > log.last[subject].version {
				log.last[subject] = streamed{version: c.Version, status: c.To}
			}
			log.mu.Unlock()
			if terminal(c.To) {
				select {
				case log.ended <- struct{}{}:
				default:
				}
			}
		}
	}()
	return log, nil
}

// ErrInvariant marks a broken invariant.
var ErrInvariant = errors.New("invariant broken")

// Create asks for one generation of model under a new idempotency key,
// as p.Key's tenant, and returns its task id: for drivers that pace their
// own requests (the scheduling benchmark).
func Create(ctx context.Context, p Params, model, prompt string, seconds int) (uuid.UUID, error) {
	if p.Client == nil {
		p.Client = http.DefaultClient
	}
	return create(ctx, p, uuid.NewString(), map[string]any{
		"model": model, "prompt": PromptMarker + " " + prompt, "duration_seconds": seconds, "resolution": "1280x720",
	})
}
