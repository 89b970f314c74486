package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// The fault kinds.
const (
	faultKill     = "kill"     // SIGKILL of any process
	faultKillBusy = "killbusy" // SIGKILL of a stage function while tasks (or renders) are in its step
	faultPause    = "pause"    // SIGSTOP past the invisible time, then SIGCONT
	faultProxy    = "proxy"    // RocketMQ proxy restart
	faultPostgres = "postgres" // PostgreSQL immediate-mode restart
	faultRedis    = "redis"    // Redis restart that loses its data
	faultS3       = "s3"       // S3 server restart
	faultOutage   = "outage"   // a provider (now and then both) answers 503 to everything for a while
	faultReviewer = "reviewer" // the content reviewer refuses every connection for a while
)

var allKinds = strings.Join([]string{faultKill, faultKillBusy, faultPause, faultProxy, faultPostgres, faultRedis, faultS3, faultOutage, faultReviewer}, ",")

// weights make kills common, pauses and outages rarer; service restarts
// are planned, not drawn.
var weights = map[string]int{faultKill: 6, faultKillBusy: 6, faultPause: 3, faultProxy: 0, faultPostgres: 0, faultRedis: 0, faultS3: 0, faultOutage: 2, faultReviewer: 1}

// serviceBudget is how often each service is restarted in a run: once per
// two minutes of faults, at least once, at seeded times.
func serviceBudget(window time.Duration) int { return max(1, int(window/(2*time.Minute))) }

func parseKinds(s string) ([]string, error) {
	var out []string
	for k := range strings.SplitSeq(s, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if _, ok := weights[k]; !ok {
			return nil, fmt.Errorf("unknown fault kind %q (known: %s)", k, allKinds)
		}
		out = append(out, k)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no fault kinds: give some of %s", allKinds)
	}
	return out, nil
}

// faulter draws and injects the faults.
type faulter struct {
	w     *world
	kinds []string
	// proxyRestarts are the proxy restarts done, for the recovery check.
	proxyRestarts []proxyRestart
	// pauses are the SIGSTOPs done: a consumer's time stopped is not deaf.
	pauses []pause
	rng    *rand.Rand
	every  time.Duration
	counts map[string]int
	log    []string
	start  time.Time
}

func newFaulter(w *world, kinds []string, seed int64, every time.Duration) *faulter {
	return &faulter{w: w, kinds: kinds, rng: rand.New(rand.NewPCG(uint64(seed), 0x5eed)), every: every, counts: map[string]int{}}
}

// run injects faults for window and returns when the last one ended.
func (f *faulter) run(ctx context.Context, window time.Duration) time.Time {
	f.start = time.Now()
	end := f.start.Add(window)
	last := f.start
	// Every service fault asked for happens, at a seeded time between a
	// tenth and four fifths of the window, and so does at least one outage
	// of each dependency outside (the provider's and the reviewer's, in the
	// first half), so that even a short run fails over and waits on the
	// review; the rest are drawn as they go.
	type planned struct {
		at   time.Time
		kind string
	}
	var plan []planned
	for _, k := range f.kinds {
		n, from, span := 0, 0.1, 0.7
		switch {
		case isService(k):
			n = serviceBudget(window)
		case k == faultOutage || k == faultReviewer:
			// In the first half, while generations still arrive: an outage
			// after the last submit would have nothing to fail over.
			n, span = 1, 0.4
		}
		for range n {
			plan = append(plan, planned{f.start.Add(time.Duration(float64(window) * (from + span*f.rng.Float64()))), k})
		}
	}
	slices.SortFunc(plan, func(a, b planned) int { return a.at.Compare(b.at) })
	for {
		wait := time.Duration(float64(f.every) * (0.5 + f.rng.Float64()))
		if time.Now().Add(wait).After(end) {
			// A service restart takes the loop's time (a proxy restart
			// half a minute): what it planned and has not reached yet
			// happens now, so that every kind asked for is injected.
			for _, p := range plan {
				if ended, what := f.inject(ctx, p.kind); what != "" {
					f.record(p.kind, what)
					last = maxTime(last, ended)
				}
			}
			break
		}
		select {
		case <-ctx.Done():
			return last
		case <-time.After(wait):
		}
		kind := f.draw()
		if len(plan) > 0 && !plan[0].at.After(time.Now()) {
			kind, plan = plan[0].kind, plan[1:]
		}
		if kind == "" {
			continue
		}
		ended, what := f.inject(ctx, kind)
		if what == "" {
			continue
		}
		f.record(kind, what)
		last = maxTime(last, ended)
	}
	// A pause or an outage may outlast the window: the last fault ends
	// when its effect does.
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(last)):
	}
	return last
}

// record counts and prints one injected fault.
func (f *faulter) record(kind, what string) {
	f.counts[kind]++
	line := fmt.Sprintf("%6.1fs  %-8s %s", time.Since(f.start).Seconds(), kind, what)
	f.log = append(f.log, line)
	fmt.Println("chaos: fault", line)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// draw picks a process fault or an outage by weight.
func (f *faulter) draw() string {
	var pool []string
	for _, k := range f.kinds {
		if isService(k) {
			continue
		}
		for range weights[k] {
			pool = append(pool, k)
		}
	}
	if len(pool) == 0 {
		return ""
	}
	return pool[f.rng.IntN(len(pool))]
}

func isService(kind string) bool {
	return slices.Contains([]string{faultProxy, faultPostgres, faultRedis, faultS3}, kind)
}

// inject applies one fault; it returns when its effect ends and what it
// did ("" when it found nothing to do).
func (f *faulter) inject(ctx context.Context, kind string) (time.Time, string) {
	switch kind {
	case faultKill:
		p := f.w.procs[f.rng.IntN(len(f.w.procs))]
		if p.kill() {
			return time.Now(), "SIGKILL " + p.name
		}
	case faultKillBusy:
		p := f.busyFunction(ctx)
		if p != nil && p.kill() {
			return time.Now(), "SIGKILL " + p.name + " while tasks are in its step"
		}
	case faultPause:
		var candidates []*proc
		for _, p := range f.w.procs {
			if p.kind == "source" || p.kind == "function" || p.kind == "relay" {
				candidates = append(candidates, p)
			}
		}
		p := candidates[f.rng.IntN(len(candidates))]
		invisible := sourceInvisible
		if p.kind == "source" {
			invisible, _ = deliveryBudget(p.stage)
		}
		d := invisible + time.Duration(f.rng.IntN(10))*time.Second
		from := time.Now()
		if p.pause(ctx, d) {
			f.pauses = append(f.pauses, pause{Proc: p.name, From: from, To: from.Add(d)})
			return time.Now().Add(d), fmt.Sprintf("SIGSTOP %s for %s (invisible time %s), then SIGCONT", p.name, d, invisible)
		}
	case faultOutage:
		// Mostly Replicate, the first choice, whose outage sends new
		// generations over to Runway; sometimes Runway; now and then both,
		// when a generation can only wait.
		// The first is Replicate's, so that every run fails over.
		targets := f.w.providers[:1]
		switch f.rng.IntN(6) {
		case 0, 1:
			targets = f.w.providers[1:2]
		case 2:
			targets = f.w.providers
		}
		if f.counts[faultOutage] == 0 {
			targets = f.w.providers[:1]
		}
		d := time.Duration(5+f.rng.IntN(15)) * time.Second
		until := time.Now().Add(d)
		var names []string
		for _, p := range targets {
			if p.outageUntil(until) {
				names = append(names, p.name)
			}
		}
		if len(names) == 0 {
			return time.Now(), "" // an outage already lasts longer
		}
		return until, fmt.Sprintf("%s outage for %s (every API call answers 503)", strings.Join(names, " and "), d)
	case faultReviewer:
		d := time.Duration(5+f.rng.IntN(25)) * time.Second
		until := time.Now().Add(d)
		if !f.w.reviewerDown(ctx, until) {
			return time.Now(), ""
		}
		return until, fmt.Sprintf("content reviewer down for %s (every call refused; REVIEW_MAX_WAIT %s)", d, reviewMaxWait)
	case faultProxy, faultPostgres, faultRedis, faultS3:
		// A proxy restart follows a render function killed while it held
		// chunk claims, when one does: the chunks' redeliveries must come
		// through the restart, and no render may fail for it.
		killed := ""
		if kind == faultProxy {
			if n := len(f.proxyRestarts); n > 0 {
				select {
				case <-ctx.Done():
					return time.Now(), ""
				case <-time.After(time.Until(f.proxyRestarts[n-1].Back.Add(proxyQuiet))):
				}
			}
			killed = f.killRenderHolding(ctx)
		}
		began := time.Now()
		if err := f.w.services(ctx, "restart-"+kind); err != nil {
			fmt.Println("chaos:", err)
			return time.Now(), ""
		}
		back := time.Now()
		if kind == faultProxy {
			f.proxyRestarts = append(f.proxyRestarts, proxyRestart{Began: began, Back: back})
		}
		return back, fmt.Sprintf("%s restarted (%s down)%s", serviceName[kind], back.Sub(began).Round(100*time.Millisecond), killed)
	}
	return time.Now(), ""
}

var serviceName = map[string]string{
	faultProxy:    "RocketMQ proxy",
	faultPostgres: "PostgreSQL (immediate mode)",
	faultRedis:    "Redis (its data lost)",
	faultS3:       "S3 server",
}

// stepFunctions are the stages that hold a task's work in a state (a
// render's RENDERING is the render function's, see busyFunction).
var stepFunctions = map[string]string{
	"SUBMITTING": "submit", "FETCHING": "fetch", "MEDIA_PROCESSING": "transcode", "PROVIDER_RUNNING": "poll", "RECONCILING": "reconcile",
}

// busyFunction is the function of the step most tasks are in now, or
// the render function while a render is RENDERING: the few renders would
// never outnumber the tasks of a step, so one in RENDERING takes the kill
// one time in three (mid-chunk, mostly).
// killRenderHolding SIGKILLs the render function if it holds chunk
// claims, and says so ("" when it held none).
func (f *faulter) killRenderHolding(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var held int
	if err := f.w.pool.QueryRow(qctx, `SELECT count(*) FROM render_chunks WHERE status = 'RENDERING' AND lease_until > now()`).Scan(&held); err != nil || held == 0 {
		return ""
	}
	for _, p := range f.w.procs {
		if p.name == "function-render" && p.kill() {
			return fmt.Sprintf(", after SIGKILL function-render holding %d chunk claims", held)
		}
	}
	return ""
}

func (f *faulter) busyFunction(ctx context.Context) *proc {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := f.w.pool.Query(qctx, `SELECT status, count(*) FROM generation_tasks
		WHERE status IN ('SUBMITTING', 'FETCHING', 'MEDIA_PROCESSING', 'PROVIDER_RUNNING', 'RECONCILING') GROUP BY status
		UNION ALL SELECT 'RENDERING', count(*) FROM render_jobs WHERE status = 'RENDERING' HAVING count(*) > 0
		ORDER BY 2 DESC`)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var stages []string
	rendering := false
	for rows.Next() {
		var status string
		var n int
		if rows.Scan(&status, &n) == nil {
			if status == "RENDERING" {
				rendering = true
				continue
			}
			stages = append(stages, stepFunctions[status])
			if status == "MEDIA_PROCESSING" {
				stages = append(stages, "probe", "review")
			}
		}
	}
	var stage string
	switch {
	case rendering && (len(stages) == 0 || f.rng.IntN(3) == 0):
		stage = "render"
	case len(stages) == 0:
		return nil
	default:
		// The busiest step, or now and then the next ones.
		stage = stages[min(f.rng.IntN(3), len(stages)-1)]
	}
	for _, p := range f.w.procs {
		if p.name == "function-"+stage {
			return p
		}
	}
	return nil
}
