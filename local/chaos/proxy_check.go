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
// its broker registered) every consumer group must receive again: through
// any of its consumers, as TestProxyRestartConsumersRecover allows on an
// idle machine. A broker restart costs seconds.
const maxDeafAfterRestart = 5 * time.Second

// maxConsumerDeaf bounds each consumer of a group on its own. It is
// looser: each consumer keeps one worker of its own, but that one may
// still be running a delivery received before the restart (a render chunk
// takes a while) while the shared ones take the restart's redeliveries;
// the consumer then waits for a free worker before it sends its receive,
// busy rather than deaf.
const maxConsumerDeaf = 30 * time.Second

// proxyQuiet is how long after a proxy restart the next one may begin:
// longer than a long poll (20 s) plus maxDeafAfterRestart, so that every
// consumer's first receive after one restart has answered before the
// next, and each recovery is told apart.
const proxyQuiet = 30 * time.Second

// deafWindow bounds which recoveries belong to a restart: one logged
// later than this after the proxy came back is another failure's.
const deafWindow = 2 * time.Minute

// pause is a process the faulter stopped (SIGSTOP) from From to To.
type pause struct {
	Proc     string
	From, To time.Time
}

// stopped is how long the pauses of proc overlap [from, to): time a
// consumer's process was stopped is not time it was deaf.
func stopped(pauses []pause, proc string, from, to time.Time) time.Duration {
	var d time.Duration
	for _, p := range pauses {
		if p.Proc != proc {
			continue
		}
		lo, hi := maxTime(p.From, from), minTime(p.To, to)
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// proxyRestart is one proxy restart and, per consumer (group and topic),
// how long after the proxy was back the consumer received again.
type proxyRestart struct {
	Began, Back time.Time
	Deaf        map[string]time.Duration
}

// deafness is the mean and longest deaf time after p, per consumer or
// (byGroup) per consumer group, its fastest consumer's, and who was
// slowest.
func (p proxyRestart) deafness(byGroup bool) (n int, mean, worst time.Duration, slowest string) {
	deaf := p.Deaf
	if byGroup {
		deaf = p.groups()
	}
	if len(deaf) == 0 {
		return 0, 0, 0, "-"
	}
	var sum time.Duration
	for who, d := range deaf {
		sum += d
		if d > worst || slowest == "" || (d == worst && who < slowest) {
			worst, slowest = d, who
		}
	}
	return len(deaf), sum / time.Duration(len(deaf)), worst, slowest
}

// groups is the deaf time of each consumer group after p: its first
// consumer's to receive again.
func (p proxyRestart) groups() map[string]time.Duration {
	out := map[string]time.Duration{}
	for who, d := range p.Deaf {
		group, _, _ := strings.Cut(who, "/")
		if cur, ok := out[group]; !ok || d < cur {
			out[group] = d
		}
	}
	return out
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
	// Proc is the process whose log has the line (its file's name).
	Proc string `json:"-"`
}

// listening is when the consumer of rec was receiving again.
func (rec recovery) listening() time.Time {
	if rec.ListeningSince.IsZero() {
		return rec.Time
	}
	return rec.ListeningSince
}

// checkProxyRecovery reads the consumers' recovery lines from the
// processes' logs and holds every consumer group to receiving again within
// maxDeafAfterRestart of each proxy restart, and each consumer within
// maxConsumerDeaf, less the time its process was paused meanwhile. A
// recovery belongs to the last restart that began before the consumer
// listened again. A consumer whose process started
// after the restart logs no recovery (it never failed): it is not counted,
// and convergence shows whether it worked.
func (w *world) checkProxyRecovery(_ context.Context, r *report) error {
	if len(r.ProxyRestarts) == 0 {
		return nil
	}
	recoveries, err := readRecoveries(filepath.Join(w.runDir, "logs"))
	if err != nil {
		return err
	}
	var lateGroups, lateConsumers []string
	for i := range r.ProxyRestarts {
		p := &r.ProxyRestarts[i]
		until, cut := p.Back.Add(deafWindow), false
		if i+1 < len(r.ProxyRestarts) && r.ProxyRestarts[i+1].Began.Before(until) {
			until, cut = r.ProxyRestarts[i+1].Began, true
		}
		p.Deaf = map[string]time.Duration{}
		for _, rec := range recoveries {
			paused := stopped(r.Pauses, rec.Proc, p.Back, rec.listening())
			limit := until
			if !cut {
				limit = until.Add(paused) // a paused consumer's window runs on while it was stopped
			}
			if rec.listening().Before(p.Began) || !rec.listening().Before(limit) {
				continue
			}
			who := rec.Group + "/" + rec.Topic
			if _, seen := p.Deaf[who]; seen {
				continue // a later failure of the same consumer
			}
			d := max(rec.listening().Sub(p.Back)-paused, 0)
			p.Deaf[who] = d
			if d >= maxConsumerDeaf {
				lateConsumers = append(lateConsumers, fmt.Sprintf("%s %s after the restart at %s", who, d.Round(10*time.Millisecond), p.Back.Format(time.TimeOnly)))
			}
		}
		for group, d := range p.groups() {
			if d >= maxDeafAfterRestart {
				lateGroups = append(lateGroups, fmt.Sprintf("%s %s after the restart at %s", group, d.Round(10*time.Millisecond), p.Back.Format(time.TimeOnly)))
			}
		}
	}
	slices.Sort(lateGroups)
	slices.Sort(lateConsumers)
	groups, consumers, worstGroup, worstConsumer := 0, 0, time.Duration(0), time.Duration(0)
	for _, p := range r.ProxyRestarts {
		n, _, w, _ := p.deafness(true)
		groups, worstGroup = groups+n, max(worstGroup, w)
		n, _, w, _ = p.deafness(false)
		consumers, worstConsumer = consumers+n, max(worstConsumer, w)
	}
	detail := fmt.Sprintf("%d restarts, %d group recoveries, the slowest %s after the proxy was back", len(r.ProxyRestarts), groups, worstGroup.Round(10*time.Millisecond))
	if len(lateGroups) > 0 {
		detail += "; late: " + strings.Join(lateGroups, ", ")
	}
	r.add(fmt.Sprintf("every consumer group receives again within %s of a proxy restart", maxDeafAfterRestart), len(lateGroups) == 0, "%s", detail)
	detail = fmt.Sprintf("%d consumer recoveries, the slowest %s after the proxy was back", consumers, worstConsumer.Round(10*time.Millisecond))
	if len(lateConsumers) > 0 {
		detail += "; late: " + strings.Join(lateConsumers, ", ")
	}
	r.add(fmt.Sprintf("every consumer receives again within %s (busy with its group's redeliveries at most)", maxConsumerDeaf), len(lateConsumers) == 0, "%s", detail)
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
				rec.Proc = strings.TrimSuffix(filepath.Base(name), ".log")
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
