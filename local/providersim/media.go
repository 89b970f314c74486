package providersim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// file serves a job's output: 404 until the job succeeded and
// OutputNotReady has passed, 410 once OutputTTL has.
func (s *Server) file(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	s.mu.Lock()
	j := s.jobs[r.PathValue("id")]
	var status string
	var ended time.Time
	if j != nil {
		status, ended = j.state(now)
	}
	notReady := status == "succeeded" && now.Before(ended.Add(s.opts.OutputNotReady))
	expired := status == "succeeded" && !now.Before(ended.Add(s.opts.OutputTTL))
	switch {
	case expired:
		s.stats.Faults.OutputExpired++
	case notReady:
		s.stats.Faults.OutputNotReady++
	}
	var width, height, seconds int
	var format string
	if j != nil {
		width, height, seconds, format = j.width, j.height, j.seconds, j.format
	}
	s.mu.Unlock()

	switch {
	case expired && format == FormatRunway:
		// A signed CDN URL past its life is refused, not gone.
		http.Error(w, "the signature of this URL has expired", http.StatusForbidden)
		return
	case expired:
		http.Error(w, "this file has been removed", http.StatusGone)
		return
	case status != "succeeded" || notReady:
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	path, err := s.media.file(r.Context(), width, height, seconds)
	if err != nil {
		if r.Context().Err() == nil {
			s.log.Error("provider simulator could not make an output", slog.String("job_id", j.id), slog.String("error", err.Error()))
			http.Error(w, "output generation failed", http.StatusInternalServerError)
		}
		return
	}
	s.serveOutput(w, r, j.id, path)
}

// serveOutput sends the clip at path as job id's output. A clip it cannot
// read (another user's cache, a file removed under it) is a 500 and a log
// line that says which file and why.
func (s *Server) serveOutput(w http.ResponseWriter, r *http.Request, id, path string) {
	f, err := os.Open(path)
	if err == nil {
		defer f.Close()
		var info os.FileInfo
		if info, err = f.Stat(); err == nil {
			w.Header().Set("Content-Type", "video/mp4")
			http.ServeContent(w, r, "output.mp4", info.ModTime(), f)
			return
		}
	}
	s.log.Error("provider simulator cannot read a cached output; check the cache dir (PROVIDERSIM_CACHE_DIR) belongs to this user",
		slog.String("job_id", id), slog.String("path", path), slog.String("error", err.Error()))
	http.Error(w, "output unavailable", http.StatusInternalServerError)
}

// media makes each distinct output once and keeps it on disk, across
// simulators and runs: ffmpeg is slow on small machines.
type media struct {
	ffmpeg string
	dir    string

	mu      sync.Mutex
	entries map[string]*mediaEntry
}

// mediaEntry is one output being made; done closes when path or err is set.
type mediaEntry struct {
	done chan struct{}
	path string
	err  error
}

// file returns the path of a width×height clip of seconds, making it if no
// run has yet. Concurrent callers for one clip share one ffmpeg run; if
// that run's caller leaves, the next caller starts another.
func (m *media) file(ctx context.Context, width, height, seconds int) (string, error) {
	name := fmt.Sprintf("sim-v1-%dx%d-%ds.mp4", width, height, seconds)
	path := filepath.Join(m.dir, name)
	for {
		m.mu.Lock()
		e := m.entries[name]
		if e == nil {
			if _, err := os.Stat(path); err == nil {
				m.mu.Unlock()
				return path, nil
			}
			e = &mediaEntry{done: make(chan struct{})}
			m.entries[name] = e
			m.mu.Unlock()

			e.path, e.err = path, m.generate(ctx, path, width, height, seconds)
			m.mu.Lock()
			delete(m.entries, name) // done: the file, or nothing, is on disk
			m.mu.Unlock()
			close(e.done)
			return e.path, e.err
		}
		m.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-e.done:
		}
		if e.err == nil {
			return e.path, nil
		}
		if !errors.Is(e.err, context.Canceled) && !errors.Is(e.err, context.DeadlineExceeded) {
			return "", e.err
		}
	}
}

// generate renders an H.264 test pattern with an AAC tone (so a waveform
// has something to draw) into path, through a temporary file so path is
// never partial, even with another process making the same clip.
func (m *media) generate(ctx context.Context, path string, width, height, seconds int) error {
	tmp, err := os.CreateTemp(m.dir, ".gen-*.mp4")
	if err != nil {
		return fmt.Errorf("create temp output: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	// CreateTemp makes the file 0600; a clip is a test pattern, readable by
	// whoever shares the folder.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("make temp output readable: %w", err)
	}
	d := strconv.Itoa(seconds)
	cmd := exec.CommandContext(ctx, m.ffmpeg,
		"-nostdin", "-hide_banner", "-loglevel", "error",
		"-f", "lavfi", "-i", fmt.Sprintf("testsrc2=size=%dx%d:rate=24:duration=%s", width, height, d),
		"-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000:duration="+d,
		"-map", "0:v", "-map", "1:a",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p",
		"-c:a", "aac", "-b:a", "96k",
		"-shortest", "-movflags", "+faststart", "-f", "mp4", "-y", tmp.Name())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("ffmpeg: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("store output: %w", err)
	}
	return nil
}
