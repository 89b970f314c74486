package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/adapter/source"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/media"
	"github.com/aivedio/pipeline/shared/servicetest"
)

// benchGenerations is how many generations one journey benchmark drives,
// all submitted at once by one tenant.
const benchGenerations = 30

// journeyBroker is a broker the journey benchmark runs on.
type journeyBroker struct {
	name string
	// endpoint is the ROCKETMQ_ENDPOINT to run with; "" is the emulator.
	endpoint func(b *testing.B) string
}

// journeyBrokers are the emulator, and the real RocketMQ proxy in builds
// without -race (journey_bench_realbroker_test.go adds it).
var journeyBrokers = []journeyBroker{{name: "emulator", endpoint: func(*testing.B) string { return "" }}}

// jobMix is how long the simulator's provider jobs run.
type jobMix struct {
	name     string
	min, max time.Duration
	// replicateDown answers every Replicate request 503: its circuit
	// opens and the tasks fail over to Runway.
	replicateDown bool
}

var jobMixes = []jobMix{
	// Jobs that end at once: the chain's own throughput and cost.
	{"instant-jobs", 0, 0, false},
	// The simulator's defaults (2–5 s): the case issue #4's goal of at most
	// 12 broker messages per generation is stated for.
	{"default-jobs", providersim.DefaultOptions().JobDurationMin, providersim.DefaultOptions().JobDurationMax, false},
	// The first provider down: the cost of failing over to the second.
	{"replicate-down", providersim.DefaultOptions().JobDurationMin, providersim.DefaultOptions().JobDurationMax, true},
}

// BenchmarkJourney drives benchGenerations generations through the API of
// the whole pipeline, on the real PostgreSQL, Redis, S3 server and ffmpeg,
// with the product's default journey settings and a fault-free provider
// simulator, and reports throughput, broker messages and CPU per
// generation and the lateness of delayed wake-ups. `make bench` runs it.
//
// Each run's table per stage, read from the pipeline's own histograms, is
// printed once every run is done: a benchmark's log is cut at 10 lines,
// and printing while a run goes would split its result line.
func BenchmarkJourney(b *testing.B) {
	servicesAtRest = restingServicesCPU(5 * time.Second)
	var tables []string
	for _, br := range journeyBrokers {
		b.Run(br.name, func(b *testing.B) {
			for _, jobs := range jobMixes {
				b.Run(jobs.name, func(b *testing.B) { tables = append(tables, benchJourney(b, br, jobs)) })
			}
		})
	}
	for _, t := range tables {
		fmt.Print("\n", t)
	}
}

// benchJourney runs one benchmark and returns its table.
func benchJourney(b *testing.B, br journeyBroker, jobs jobMix) string {
	benchServices(b, br.endpoint(b))
	o := defaultOptions()
	o.apiAddr, o.opsAddr = "127.0.0.1:0", "127.0.0.1:0"
	o.logFormat = "json"
	o.logTo = io.Discard // logged as in production, but not into the benchmark's output
	o.sim.JobDurationMin, o.sim.JobDurationMax = jobs.min, jobs.max
	o.runwaySim.JobDurationMin, o.runwaySim.JobDurationMax = jobs.min, jobs.max
	if jobs.replicateDown {
		o.sim.Rate5xx = 1
	}
	ctx := b.Context()
	env, err := start(ctx, o)
	require.NoError(b, err)
	b.Cleanup(env.close)
	quiesce(b)

	before := read()
	var runs []drive.Result
	for b.Loop() {
		res, err := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: benchGenerations,
			Models: env.models, Timeout: 5 * time.Minute})
		require.NoError(b, err)
		runs = append(runs, res)
	}

	// Check waits for the last settlements, so the reading after it holds
	// every event of the run.
	byStatus := map[string]int{}
	var failovers, remoteJobs, mostPerTask int
	for _, res := range runs {
		rep, err := drive.Check(ctx, env.facts(), res)
		require.NoError(b, err)
		require.Empty(b, rep.Violations, "a benchmark of a broken pipeline measures nothing")
		for s, n := range rep.ByStatus {
			byStatus[s] += n
		}
		failovers += rep.Failovers
		remoteJobs += rep.RemoteJobs
		mostPerTask = max(mostPerTask, rep.MaxJobsPerTask)
	}
	after := read()
	f, err := journeyFacts(ctx, env.pool, runs)
	require.NoError(b, err)
	f.name = br.name + ", " + strings.ReplaceAll(jobs.name, "-", " ")
	f.byStatus = byStatus
	f.failovers, f.remoteJobs, f.mostJobsPerTask = failovers, remoteJobs, mostPerTask
	return f.report(b, before, after)
}

// benchServices points the environment at the test services, the run on a
// schema of its own, and at the broker endpoint ("" for the emulator). The
// journey settings keep the product's defaults.
func benchServices(b *testing.B, rocketmqEndpoint string) {
	b.Setenv("DATABASE_URL", dbtest.TestSchemaURL(b))
	for _, v := range []string{"REDIS_URL", "S3_ENDPOINT", "S3_ACCESS_KEY_ID", "S3_SECRET_ACCESS_KEY"} {
		b.Setenv(v, servicetest.Env(b, "journey services", v))
	}
	b.Setenv("ROCKETMQ_ENDPOINT", rocketmqEndpoint)
	b.Setenv("LOCAL_DATA_DIR", b.TempDir())
}

// quiesce waits until the stages have handled nothing for a second (at
// most 15 s). On the real broker the consumer groups are shared: a new
// consumer first gets what earlier runs left behind, events of tasks of
// other schemas, which must not count as this run's.
func quiesce(b *testing.B) {
	b.Helper()
	handled := func() (n uint64) {
		for _, h := range gatherHistograms(stage.Collector()) {
			n += h.count
		}
		return n
	}
	last := handled()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); {
		time.Sleep(time.Second)
		n := handled()
		if n == last {
			return
		}
		last = n
	}
	b.Logf("stages still busy with earlier runs' leftovers after 15 s; measuring anyway")
}

// reading is the process's counters at one moment.
type reading struct {
	at             time.Time
	self, children time.Duration
	media          media.CPU
	mediaByOp      map[string]float64   // CPU seconds by operation
	stages         map[string]histogram // work wall time by stage
	failed         map[string]histogram // by stage, outcomes other than ok
	lateness       map[string]histogram // by consumer group
	inbox          inbox.Counts
	services       map[string]time.Duration // nil when unknown
}

func read() reading {
	r := reading{
		at:        time.Now(),
		self:      rusage(syscall.RUSAGE_SELF),
		children:  rusage(syscall.RUSAGE_CHILDREN),
		media:     media.CPUTotals(),
		mediaByOp: gatherCounters(media.Collectors(), "aivedio_media_cpu_seconds_total", "operation"),
		stages:    gatherHistograms(stage.Collector(), "stage"),
		failed:    map[string]histogram{},
		lateness:  gatherHistograms(source.WakeupLateness(), "consumer_group"),
		inbox:     inbox.Totals(),
	}
	for k, h := range gatherHistograms(stage.Collector(), "stage", "outcome") {
		if st, outcome, _ := strings.Cut(k, "/"); outcome != stage.OutcomeOK {
			r.failed[st] = r.failed[st].add(h)
		}
	}
	if svc, ok := servicesCPU(); ok {
		r.services = svc
	}
	return r
}

// facts are what the database says about a run's tasks.
type facts struct {
	name          string
	generations   int
	byStatus      map[string]int
	span          time.Duration // first task created to last task settled, summed over iterations
	messages      int
	messagesByTyp map[string]int
	changesTo     map[string]int // task.state.changed by the state changed to
	// failovers are attempts left for another provider; remoteJobs the
	// jobs every provider started, mostJobsPerTask the most for one task.
	failovers, remoteJobs, mostJobsPerTask int
}

// journeyFacts counts the outbox rows of the runs' tasks, one broker
// message each (the relay is the broker's only writer), and measures each
// run's span from the first task's creation to the last one's final
// transition: the driver's own polling and its wait for the event stream
// are not the pipeline's time.
func journeyFacts(ctx context.Context, pool *pgxpool.Pool, runs []drive.Result) (facts, error) {
	f := facts{messagesByTyp: map[string]int{}, changesTo: map[string]int{}}
	for _, res := range runs {
		f.generations += len(res.Tasks)
		var first, last time.Time
		if err := pool.QueryRow(ctx, `SELECT min(created_at), max(updated_at) FROM generation_tasks WHERE task_id = ANY($1)`,
			res.Tasks).Scan(&first, &last); err != nil {
			return f, fmt.Errorf("read task span: %w", err)
		}
		f.span += last.Sub(first)
		ids := make([]string, len(res.Tasks))
		for i, id := range res.Tasks {
			ids[i] = id.String()
		}
		rows, err := pool.Query(ctx, `SELECT event_type, coalesce(payload->>'to', ''), count(*) FROM outbox_events
			WHERE aggregate_type = 'generation_task' AND aggregate_id = ANY($1) GROUP BY 1, 2`, ids)
		if err != nil {
			return f, fmt.Errorf("count outbox rows: %w", err)
		}
		var typ, to string
		var n int
		if _, err := pgx.ForEachRow(rows, []any{&typ, &to, &n}, func() error {
			f.messagesByTyp[typ] += n
			f.messages += n
			if to != "" {
				f.changesTo[to] += n
			}
			return nil
		}); err != nil {
			return f, fmt.Errorf("count outbox rows: %w", err)
		}
	}
	return f, nil
}

// mediaStage is the stage whose media operation each is.
var mediaStage = map[string]string{
	media.OpProbe: "probe", media.OpProxy: "transcode", media.OpThumbnail: "transcode", media.OpWaveform: "transcode",
}

// report reports the run's metrics and returns its table.
func (f facts) report(b *testing.B, before, after reading) string {
	gens := float64(f.generations)
	stages := subHistograms(after.stages, before.stages)
	failed := subHistograms(after.failed, before.failed)
	lateness := subHistograms(after.lateness, before.lateness)
	mediaCPU := after.media.Sub(before.media)
	self := after.self - before.self
	mediaByStage := map[string]float64{}
	for op, s := range after.mediaByOp {
		mediaByStage[mediaStage[op]] += s - before.mediaByOp[op]
	}
	var allLate histogram
	for _, h := range lateness {
		allLate = allLate.add(h)
	}

	var out strings.Builder
	fmt.Fprintf(&out, "journey on %s: %d generations (%s) in %.1f s = %.2f generations/s\n",
		f.name, f.generations, summary(f.byStatus), f.span.Seconds(), gens/f.span.Seconds())
	fmt.Fprintf(&out, "  providers: %d failovers; %d remote jobs, %.2f per generation, at most %d for one task (goal <= 1)\n",
		f.failovers, f.remoteJobs, float64(f.remoteJobs)/gens, f.mostJobsPerTask)
	fmt.Fprintf(&out, "  %-10s %7s %7s %10s %10s %11s %11s\n", "stage", "events", "not ok", "wall p50", "wall p99", "wall total", "media CPU")
	var handled uint64
	for _, name := range slices.Sorted(maps.Keys(stages)) {
		h := stages[name]
		handled += h.count
		mediaCol := "-"
		if s, ok := mediaByStage[name]; ok {
			mediaCol = fmt.Sprintf("%.2f s", s)
		}
		fmt.Fprintf(&out, "  %-10s %7d %7d %10s %10s %9.2f s %11s\n", name, h.count, failed[name].count,
			seconds(h.quantile(0.5)), seconds(h.quantile(0.99)), h.sum, mediaCol)
	}
	fmt.Fprintf(&out, "  CPU per generation:\n")
	fmt.Fprintf(&out, "    control plane, this process  %.3f s  (our code; also the simulator, the driver, and the emulator when it is the broker)\n", self.Seconds()/gens)
	fmt.Fprintf(&out, "    media, ffmpeg/ffprobe        %.3f s  (%d runs)\n", mediaCPU.Total().Seconds()/gens, mediaCPU.Runs)
	svcTotal, svc := servicesDelta(before, after, gens)
	if svc != "" {
		fmt.Fprintf(&out, "    control plane, services      %s\n", svc)
	}
	var svcIdle float64
	if servicesAtRest > 0 && svc != "" {
		svcIdle = servicesAtRest * after.at.Sub(before.at).Seconds() / gens
		fmt.Fprintf(&out, "      of which at rest           %.3f s  (the services use %.3f CPU-s/s with no client, measured before the runs: the brokers' timers, PostgreSQL's background work)\n",
			svcIdle, servicesAtRest)
	}
	fmt.Fprintf(&out, "  broker messages per generation %.1f:\n", float64(f.messages)/gens)
	for _, typ := range byCount(f.messagesByTyp) {
		fmt.Fprintf(&out, "    %-30s %5.2f\n", typ, float64(f.messagesByTyp[typ])/gens)
		if typ == "task.state.changed" {
			for _, to := range byCount(f.changesTo) {
				fmt.Fprintf(&out, "      to %-25s %5.2f\n", to, float64(f.changesTo[to])/gens)
			}
		}
	}
	fmt.Fprintf(&out, "  events handled per generation %.1f (redeliveries included); inbox: %d applied, %d stale no-ops, %d duplicates\n",
		float64(handled)/gens, after.inbox.Applied-before.inbox.Applied, after.inbox.StaleNoops-before.inbox.StaleNoops,
		after.inbox.Duplicates-before.inbox.Duplicates)
	fmt.Fprintf(&out, "  wake-up lateness of %d delayed messages: p50 %s, p99 %s, %.1f%% within 1.5 s (goal p99 <= 1.5 s)\n", allLate.count,
		seconds(allLate.quantile(0.5)), seconds(allLate.quantile(0.99)), 100*allLate.within(1.5))
	for _, g := range slices.Sorted(maps.Keys(lateness)) {
		fmt.Fprintf(&out, "    %-30s %4d, p50 %s, p99 %s\n", g, lateness[g].count, seconds(lateness[g].quantile(0.5)), seconds(lateness[g].quantile(0.99)))
	}
	b.ReportMetric(gens/f.span.Seconds(), "gen/s")
	b.ReportMetric(float64(f.messages)/gens, "msgs/gen")
	b.ReportMetric(float64(f.failovers), "failovers")
	b.ReportMetric(float64(f.remoteJobs)/gens, "remote-jobs/gen")
	if allLate.count > 0 {
		b.ReportMetric(allLate.quantile(0.99), "wake-p99-s")
	}
	b.ReportMetric(self.Seconds()/gens, "ctl-cpu-s/gen")
	b.ReportMetric(mediaCPU.Total().Seconds()/gens, "media-cpu-s/gen")
	if svc != "" {
		b.ReportMetric(svcTotal, "svc-cpu-s/gen")
	}
	if svcIdle > 0 {
		b.ReportMetric(svcIdle, "svc-idle-cpu-s/gen")
	}
	return out.String()
}

// servicesDelta is the services' CPU per generation during the run, and
// its description; "" when it is unknown.
func servicesDelta(before, after reading, gens float64) (float64, string) {
	if before.services == nil || after.services == nil {
		return 0, ""
	}
	var parts []string
	var total time.Duration
	for _, name := range slices.Sorted(maps.Keys(after.services)) {
		d := after.services[name] - before.services[name]
		total += d
		parts = append(parts, fmt.Sprintf("%s %.3f", name, d.Seconds()/gens))
	}
	return total.Seconds() / gens, fmt.Sprintf("%.3f s  (whole processes, so other clients' work too: %s)", total.Seconds()/gens, strings.Join(parts, ", "))
}

// byCount orders the keys of m by count, largest first.
func byCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	return keys
}

// seconds prints a duration in seconds, readable from 1 ms to minutes.
func seconds(s float64) string {
	switch {
	case s != s: // NaN: nothing observed
		return "-"
	case s < 1:
		return fmt.Sprintf("%.0f ms", s*1000)
	default:
		return fmt.Sprintf("%.2f s", s)
	}
}
