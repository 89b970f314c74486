//go:build !race

package kernelbench_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aivedio/pipeline/adapter/mq"
)

// timedProducer records every Send the relay makes, to tell slow sends
// from time the relay spends with no send in flight (claiming and marking
// between batches).
type timedProducer struct {
	mq.Producer
	mu    sync.Mutex
	sends [][2]time.Time
}

func (p *timedProducer) Send(ctx context.Context, m *mq.Message) (string, error) {
	start := time.Now()
	id, err := p.Producer.Send(ctx, m)
	end := time.Now()
	p.mu.Lock()
	p.sends = append(p.sends, [2]time.Time{start, end})
	p.mu.Unlock()
	return id, err
}

// reset forgets the sends so far (after a warm-up).
func (p *timedProducer) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sends = p.sends[:0]
}

// summary gives the send latency and the share of the time, from the first
// send to the last, that no send was in flight or every publisher was busy.
func (p *timedProducer) summary(publishers int) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.sends) == 0 {
		return "relay: no sends"
	}
	type edge struct {
		at    time.Time
		delta int
	}
	durs := make([]time.Duration, 0, len(p.sends))
	edges := make([]edge, 0, 2*len(p.sends))
	for _, s := range p.sends {
		durs = append(durs, s[1].Sub(s[0]))
		edges = append(edges, edge{s[0], 1}, edge{s[1], -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })
	var idle, full time.Duration
	inFlight := 0
	for i := range len(edges) - 1 {
		inFlight += edges[i].delta
		d := edges[i+1].at.Sub(edges[i].at)
		switch {
		case inFlight == 0:
			idle += d
		case inFlight >= publishers:
			full += d
		}
	}
	span := edges[len(edges)-1].at.Sub(edges[0].at)
	return fmt.Sprintf("relay: %d sends, p50 %.1f ms, p99 %.1f ms; no send in flight %.0f%% of the time, all %d publishers busy %.0f%%",
		len(durs), percentile(durs, 0.5), percentile(durs, 0.99), 100*idle.Seconds()/span.Seconds(), publishers, 100*full.Seconds()/span.Seconds())
}

// cpuSample is the CPU time used so far, in clock ticks: by the whole
// machine, and by the processes that do the work. Linux only; zero
// elsewhere.
type cpuSample struct {
	at                     time.Time
	busy                   uint64 // every CPU, from /proc/stat
	proxy, postgres, bench uint64 // RocketMQ proxy JVMs, postgres processes, this process
}

// clockTick is USER_HZ, the unit of /proc CPU times on Linux.
const clockTick = 100

func sampleCPU() cpuSample {
	s := cpuSample{at: time.Now()}
	if stat, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(stat), "\n")
		// cpu user nice system idle iowait irq softirq steal ...
		for i, f := range strings.Fields(line)[1:] {
			if v, err := strconv.ParseUint(f, 10, 64); err == nil && i != 3 && i != 4 && i < 8 {
				s.busy += v
			}
		}
	}
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		ticks, comm, ok := procCPU(pid)
		switch {
		case !ok:
		case pid == self:
			s.bench += ticks
		case comm == "postgres":
			s.postgres += ticks
		case comm == "java" && isProxy(pid):
			s.proxy += ticks
		}
	}
	return s
}

// procCPU reads a process's user+system ticks and its command name.
func procCPU(pid string) (ticks uint64, comm string, ok bool) {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, "", false
	}
	s := string(stat)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, "", false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 13 {
		return 0, "", false
	}
	user, _ := strconv.ParseUint(f[11], 10, 64)
	system, _ := strconv.ParseUint(f[12], 10, 64)
	return user + system, s[open+1 : end], true
}

func isProxy(pid string) bool {
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	return err == nil && strings.Contains(string(cmdline), "org.apache.rocketmq.proxy.ProxyStartup")
}

// logCPU logs where the CPU went between from and now, per 1,000 events.
// "other" is the machine's busy time the three do not account for: another
// workload on the host makes the figures of that run unreliable.
func logCPU(b *testing.B, from cpuSample, events int) (processPer1k float64) {
	b.Helper()
	to := sampleCPU()
	wall := to.at.Sub(from.at).Seconds()
	if to.busy == 0 || wall <= 0 || events == 0 {
		return 0
	}
	sec := func(ticks uint64) float64 { return float64(ticks) / clockTick }
	busy := sec(to.busy - from.busy)
	proxy, pg, bench := sec(to.proxy-from.proxy), sec(to.postgres-from.postgres), sec(to.bench-from.bench)
	per := 1000 / float64(events)
	b.Logf("CPU: machine %.0f%% busy of %d cores; CPU-s per 1k events: proxy %.2f, postgres %.2f, this process %.2f, other %.2f",
		100*busy/(wall*float64(runtime.NumCPU())), runtime.NumCPU(), proxy*per, pg*per, bench*per, max(busy-proxy-pg-bench, 0)*per)
	return bench * per
}
