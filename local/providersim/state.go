package providersim

import (
	"bufio"
	"bytes"
	"container/heap"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// state is the file [Options.StateFile] names: one JSON record a line, a
// job as it was created or last changed, an eviction, or (first, after a
// rewrite) the counts of jobs per key so far. It is written before the
// answer that reports the change, and rewritten compactly at every start.
// Writes are not synced: they survive the process, not the machine.
type state struct {
	path string
	f    *os.File
}

// stateRecord is one line of the state file: one field is set.
type stateRecord struct {
	Job   *jobRecord   `json:"job,omitempty"`
	Evict string       `json:"evict,omitempty"`
	Stats *statsRecord `json:"stats,omitempty"`
}

// jobRecord is a job; Counted marks a rewritten job, whose creation the
// stats record already counts.
type jobRecord struct {
	Seq        int64           `json:"seq"`
	ID         string          `json:"id"`
	Model      string          `json:"model"`
	Version    string          `json:"version"`
	Input      json.RawMessage `json:"input"`
	Webhook    string          `json:"webhook,omitempty"`
	Filter     []string        `json:"filter,omitempty"`
	IdemKey    string          `json:"idempotency_key,omitempty"`
	ReqHash    string          `json:"request_hash"`
	CreatedAt  time.Time       `json:"created_at"`
	StartAt    time.Time       `json:"start_at"`
	DoneAt     time.Time       `json:"done_at"`
	Fail       bool            `json:"fail,omitempty"`
	CanceledAt time.Time       `json:"canceled_at,omitzero"`
	Hooked     bool            `json:"hooked,omitempty"`
	Width      int             `json:"width"`
	Height     int             `json:"height"`
	Seconds    int             `json:"seconds"`
	Counted    bool            `json:"counted,omitempty"`
	// Format is empty for the Replicate jobs of files written before the
	// simulator spoke Runway.
	Format         string    `json:"format,omitempty"`
	Prompt         string    `json:"prompt,omitempty"`
	ContentFail    bool      `json:"content_fail,omitempty"`
	ThrottledUntil time.Time `json:"throttled_until,omitzero"`
}

// statsRecord is what Stats counts per job, kept across runs so that a
// job started twice for one key is seen even with a restart in between.
type statsRecord struct {
	JobsCreated           int            `json:"jobs_created"`
	JobsByIdempotencyKey  map[string]int `json:"jobs_by_idempotency_key"`
	JobsByClientRequestID map[string]int `json:"jobs_by_client_request_id"`
	UntrackedKeys         int            `json:"untracked_keys"`
	FailedJobs            int            `json:"failed_jobs"`
	JobsCreatedByFormat   map[string]int `json:"jobs_created_by_format,omitempty"`
	JobsByPrompt          map[string]int `json:"jobs_by_prompt,omitempty"`
	ContentFailedJobs     int            `json:"content_failed_jobs,omitempty"`
	Throttled             int            `json:"throttled,omitempty"`
}

func (j *job) record() *jobRecord {
	return &jobRecord{Seq: j.seq, ID: j.id, Model: j.model, Version: j.version, Input: j.input, Webhook: j.webhook, Filter: j.filter,
		IdemKey: j.idemKey, ReqHash: hex.EncodeToString(j.reqHash[:]), CreatedAt: j.createdAt, StartAt: j.startAt, DoneAt: j.doneAt,
		Fail: j.fail, CanceledAt: j.canceledAt, Hooked: j.hooked, Width: j.width, Height: j.height, Seconds: j.seconds,
		Format: j.format, Prompt: j.prompt, ContentFail: j.contentFail, ThrottledUntil: j.throttledUntil}
}

func (r *jobRecord) job() *job {
	j := &job{seq: r.Seq, id: r.ID, model: r.Model, version: r.Version, input: r.Input, webhook: r.Webhook, filter: r.Filter,
		idemKey: r.IdemKey, createdAt: r.CreatedAt, startAt: r.StartAt, doneAt: r.DoneAt, fail: r.Fail, canceledAt: r.CanceledAt,
		hooked: r.Hooked, width: r.Width, height: r.Height, seconds: r.Seconds,
		format: r.Format, prompt: r.Prompt, contentFail: r.ContentFail, throttledUntil: r.ThrottledUntil}
	if j.format == "" {
		j.format = FormatReplicate
	}
	_, _ = hex.Decode(j.reqHash[:], []byte(r.ReqHash))
	return j
}

// loadState reads the state file into s, schedules the webhooks of jobs
// whose webhook was not sent yet, and rewrites the file with what it holds.
func (s *Server) loadState(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("provider simulator state: %w", err)
	}
	if f, err := os.Open(path); err == nil {
		err = s.replayState(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("provider simulator state %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("provider simulator state: %w", err)
	}
	for _, j := range s.jobs {
		if j.webhook != "" && !j.hooked {
			// Sent again if it was in flight at the end of the last run:
			// the receiver dedupes; the client also polls.
			heap.Push(&s.due, dueItem{at: j.doneAt, id: j.id})
		}
	}
	s.state = &state{path: path}
	return s.rewriteState()
}

// replayState applies the records of r; a last line without its newline
// was being written when the process died, and its answer never went out.
func (s *Server) replayState(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		var rec stateRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("bad record: %w", err)
		}
		switch {
		case rec.Stats != nil:
			st := rec.Stats
			s.stats.JobsCreated, s.stats.UntrackedKeys, s.stats.Faults.FailedJobs = st.JobsCreated, st.UntrackedKeys, st.FailedJobs
			s.stats.Faults.ContentFailedJobs, s.stats.Faults.Throttled = st.ContentFailedJobs, st.Throttled
			maps.Copy(s.stats.JobsByIdempotencyKey, st.JobsByIdempotencyKey)
			maps.Copy(s.stats.JobsByClientRequestID, st.JobsByClientRequestID)
			maps.Copy(s.stats.JobsCreatedByFormat, st.JobsCreatedByFormat)
			maps.Copy(s.stats.JobsByPrompt, st.JobsByPrompt)
		case rec.Job != nil:
			j := rec.Job.job()
			if _, seen := s.jobs[j.id]; !seen && !rec.Job.Counted {
				s.countJobLocked(j)
			}
			s.jobs[j.id] = j
			if j.idemKey != "" {
				s.byKey[j.idemKey] = j
			}
			s.seq = max(s.seq, j.seq)
		case rec.Evict != "":
			if j := s.jobs[rec.Evict]; j != nil {
				delete(s.jobs, j.id)
				if s.byKey[j.idemKey] == j {
					delete(s.byKey, j.idemKey)
				}
			}
		}
	}
}

// rewriteState replaces the state file with the counts and the jobs held
// now, by rename, and opens it for appending.
func (s *Server) rewriteState() error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	st := s.stats
	if err := enc.Encode(stateRecord{Stats: &statsRecord{JobsCreated: st.JobsCreated, JobsByIdempotencyKey: st.JobsByIdempotencyKey,
		JobsByClientRequestID: st.JobsByClientRequestID, UntrackedKeys: st.UntrackedKeys, FailedJobs: st.Faults.FailedJobs,
		JobsCreatedByFormat: st.JobsCreatedByFormat, JobsByPrompt: st.JobsByPrompt, ContentFailedJobs: st.Faults.ContentFailedJobs,
		Throttled: st.Faults.Throttled}}); err != nil {
		return err
	}
	jobs := slices.SortedFunc(maps.Values(s.jobs), func(a, b *job) int { return int(a.seq - b.seq) })
	for _, j := range jobs {
		rec := j.record()
		rec.Counted = true
		if err := enc.Encode(stateRecord{Job: rec}); err != nil {
			return err
		}
	}
	path := s.state.path
	tmp := path + ".rewrite"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("provider simulator state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("provider simulator state: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("provider simulator state: %w", err)
	}
	s.state.f = f
	return nil
}

// saveLocked appends rec to the state file, if there is one. A failed
// write is logged: the simulator stands for a provider, whose own records
// are not the pipeline's concern, and goes on.
func (s *Server) saveLocked(rec stateRecord) {
	if s.state == nil || s.state.f == nil {
		return
	}
	line, err := json.Marshal(rec)
	if err == nil {
		_, err = s.state.f.Write(append(line, '\n'))
	}
	if err != nil {
		s.log.Error("provider simulator could not save its state", slog.String("error", err.Error()))
	}
}

// closeState closes the state file.
func (s *Server) closeState() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != nil && s.state.f != nil {
		_ = s.state.f.Close()
		s.state.f = nil
	}
}
