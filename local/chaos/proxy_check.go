package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// maxDeafAfterRestart is how long after a proxy restart (the proxy back,
// its broker registered) every consumer must receive again. Twice what
// TestProxyRestartConsumersRecover allows on an idle machine: here some
// thirty processes and ffmpeg share the cores while every consumer
// replaces its client at once. The client's own recovery takes minutes.
const maxDeafAfterRestart = 10 * time.Second

// deafWindow bounds which recoveries belong to a restart: one logged
// later than this after the proxy came back is another failure's.
const deafWindow = 2 * time.Minute

// proxyRestart is one proxy restart and, per consumer (group and topic),
// how long after the proxy was back the consumer received again.
type proxyRestart struct {
	Began, Back time.Time
	Deaf        map[string]time.Duration
}

// deafness is the mean and longest deaf time after p, and who was slowest.
func (p proxyRestart) deafness() (mean, worst time.Duration, slowest string) {
	if len(p.Deaf) == 0 {
		return 0, 0, "-"
	}
	var sum time.Duration
	for who, d := range p.Deaf {
		sum += d
		if d > worst || slowest == "" {
			worst, slowest = d, who
		}
	}
	return sum / time.Duration(len(p.Deaf)), worst, slowest
}

// recovery is a source adapter's "rocketmq consumer receiving again" line.
// The line is written when the first receive that worked returns, which on
// an idle topic is a whole long poll (20 s) after it was sent; the consumer
// was listening from ListeningSince, when that receive was sent.
type recovery struct {
	Time           time.Time `json:"time"`
	Msg            string    `json:"msg"`
	Group          string    `json:"consumer_group"`
	Topic          string    `json:"topic"`
	ListeningSince time.Time `json:"listening_since"`
}

// listening is when the consumer of rec was receiving again.
func (rec recovery) listening() time.Time {
	if rec.ListeningSince.IsZero() {
		return rec.Time
	}
	return rec.ListeningSince
}

// checkProxyRecovery reads the consumers' recovery lines from the
// processes' logs and holds every consumer to receiving again within
// maxDeafAfterRestart of each proxy restart. A consumer whose process
// started after the restart logs no recovery (it never failed): it is not
// counted, and convergence shows whether it worked.
func (w *world) checkProxyRecovery(_ context.Context, r *report) error {
	if len(r.ProxyRestarts) == 0 {
		return nil
	}
	recoveries, err := readRecoveries(filepath.Join(w.runDir, "logs"))
	if err != nil {
		return err
	}
	var late []string
	for i := range r.ProxyRestarts {
		p := &r.ProxyRestarts[i]
		p.Deaf = map[string]time.Duration{}
		for _, rec := range recoveries {
			if rec.Time.Before(p.Began) || rec.Time.After(p.Back.Add(deafWindow)) {
				continue
			}
			who := rec.Group + "/" + rec.Topic
			if _, seen := p.Deaf[who]; seen {
				continue // a later failure of the same consumer
			}
			d := max(rec.listening().Sub(p.Back), 0)
			p.Deaf[who] = d
			if d >= maxDeafAfterRestart {
				late = append(late, fmt.Sprintf("%s %s after the restart at %s", who, d.Round(10*time.Millisecond), p.Back.Format(time.TimeOnly)))
			}
		}
	}
	slices.Sort(late)
	recovered, worst := 0, time.Duration(0)
	for _, p := range r.ProxyRestarts {
		_, w, _ := p.deafness()
		worst = max(worst, w)
		recovered += len(p.Deaf)
	}
	detail := fmt.Sprintf("%d restarts, %d consumer recoveries, the slowest %s after the proxy was back", len(r.ProxyRestarts), recovered, worst.Round(10*time.Millisecond))
	if len(late) > 0 {
		detail += "; late: " + strings.Join(late, ", ")
	}
	r.add(fmt.Sprintf("every consumer receives again within %s of a proxy restart", maxDeafAfterRestart), len(late) == 0, "%s", detail)
	return nil
}

// readRecoveries reads every recovery line of the logs in dir, in time
// order. Lines that are not JSON (the RocketMQ client's own) are skipped.
func readRecoveries(dir string) ([]recovery, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	var out []recovery
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
		for sc.Scan() {
			line := sc.Bytes()
			if !strings.Contains(string(line), "rocketmq consumer receiving again") {
				continue
			}
			var rec recovery
			if json.Unmarshal(line, &rec) == nil && rec.Msg == "rocketmq consumer receiving again" {
				out = append(out, rec)
			}
		}
		err = sc.Err()
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
	}
	slices.SortFunc(out, func(a, b recovery) int { return a.Time.Compare(b.Time) })
	return out, nil
}
