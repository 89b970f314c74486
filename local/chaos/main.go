// Command chaos proves "nothing is lost when any process dies" for the
// whole system: every real binary runs as its own process, as Knative runs
// them (the API, two relays, a source adapter per consumer group, a stage
// function per stage, a DLQ drainer per group, and a reconcile ticker in
// place of the PingSource), against the real PostgreSQL, Redis, RocketMQ
// and S3 server of `make services-up`, two provider simulators (Replicate
// first, Runway to fail over to) and the content reviewer's simulator,
// all with their faults on. A small supervisor restarts whatever dies.
//
// While N generations and R renders (each a timeline of two of its
// tenant's generated clips) from several tenants run, faults are drawn
// from a seeded source and printed as they happen: SIGKILL of any process
// (stage functions while they hold work included), SIGSTOP/SIGCONT pauses
// longer than the adapters' invisible time, a RocketMQ proxy restart, a
// PostgreSQL immediate-mode restart, a Redis restart that loses its data,
// an S3 server restart, provider outage windows (one provider or both),
// and reviewer outages. Then the faults stop,
// the system is given time to converge, and the invariants are checked
// from PostgreSQL, S3 and the simulators. The table it prints ends with
// every invariant and whether it held; the exit status is non-zero when
// one broke.
//
//	make chaos                                   the long run (300 generations, 12 renders)
//	go run ./local/chaos -n 40 -faults 75s       the short run make test does
//
// It needs the services' environment (source /tmp/aivedio-services/env)
// and AIVEDIO_SERVICES_SCRIPT pointing at local/services/services.sh for
// the service restarts; `make chaos` sets both. Each run has a database
// and a bucket of its own, kept when an invariant breaks so that a person
// can look, dropped (the bucket emptied) otherwise.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	o := defaultOptions()
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	o.register(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	rep, err := run(ctx, o)
	if rep != nil {
		rep.print(os.Stdout)
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	case !rep.held():
		fmt.Fprintf(os.Stderr, "chaos: invariants broken; logs and the database %s are kept in %s\n", rep.Database, rep.RunDir)
		os.Exit(1)
	}
}

// options are the run's knobs.
type options struct {
	N        int           // generations
	Renders  int           // renders; negative: defaultRenders(N)
	Tenants  int           // tenants they are spread over
	Seed     int64         // every random choice; 0 picks one from the clock (printed)
	Faults   time.Duration // how long faults are injected
	Every    time.Duration // mean time between two faults
	Converge time.Duration // how long the system may take to converge after the last fault
	Kinds    string        // fault kinds to draw from
	RunDir   string        // logs and binaries; a temporary directory when empty
	Keep     bool          // keep the database and bucket even when every invariant holds
}

func defaultOptions() options {
	return options{N: 300, Renders: -1, Tenants: 5, Faults: 4 * time.Minute, Every: 4 * time.Second, Converge: 10 * time.Minute,
		Kinds: allKinds}
}

func (o *options) register(fs *flag.FlagSet) {
	fs.IntVar(&o.N, "n", o.N, "generations to run")
	fs.IntVar(&o.Renders, "renders", o.Renders, "renders to run, each of two generated clips (negative: max(3, n/25), 12 for 300 generations)")
	fs.IntVar(&o.Tenants, "tenants", o.Tenants, "tenants the generations are spread over")
	fs.Int64Var(&o.Seed, "seed", o.Seed, "seed of every random choice (0: from the clock; the run prints it)")
	fs.DurationVar(&o.Faults, "faults", o.Faults, "how long faults are injected")
	fs.DurationVar(&o.Every, "every", o.Every, "mean time between two faults")
	fs.DurationVar(&o.Converge, "converge", o.Converge, "how long the system may take to converge after the last fault")
	fs.StringVar(&o.Kinds, "kinds", o.Kinds, "comma-separated fault kinds: "+allKinds)
	fs.StringVar(&o.RunDir, "dir", o.RunDir, "where logs and binaries go (a new temporary directory when empty)")
	fs.BoolVar(&o.Keep, "keep", o.Keep, "keep the run's database and bucket even when every invariant holds")
}

// run is one chaos run, start to report.
func run(ctx context.Context, o options) (*report, error) {
	if o.Seed == 0 {
		o.Seed = time.Now().UnixNano() % 1_000_000
	}
	if o.Renders < 0 {
		o.Renders = defaultRenders(o.N)
	}
	kinds, err := parseKinds(o.Kinds)
	if err != nil {
		return nil, err
	}
	unlock, err := lockBroker(ctx, os.TempDir(), os.Getenv("ROCKETMQ_ENDPOINT"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	w, err := newWorld(ctx, o)
	if err != nil {
		return nil, err
	}
	defer w.close()
	fmt.Printf("chaos: seed %d, %d generations and %d renders over %d tenants, faults for %s (%s), logs in %s\n",
		o.Seed, o.N, o.Renders, o.Tenants, o.Faults, o.Kinds, w.runDir)

	// Whatever fails from here keeps the logs and the database.
	w.keep = true
	if err := w.startAll(ctx); err != nil {
		return w.report(), err
	}
	load := w.startLoad(ctx)
	renders := w.startRenders(ctx)
	f := newFaulter(w, kinds, o.Seed, o.Every)
	lastFault := f.run(ctx, o.Faults)
	if err := <-load; err != nil {
		return w.report(), fmt.Errorf("load: %w", err)
	}
	if err := <-renders; err != nil {
		return w.report(), fmt.Errorf("renders: %w", err)
	}
	converged, err := w.converge(ctx, lastFault, o.Converge)
	if err != nil {
		return w.report(), err
	}
	// Then a person decides what the system handed over, and the tasks
	// decided go on to an end.
	resolved, err := w.actAsOperator(ctx)
	if err != nil {
		return w.report(), fmt.Errorf("operator: %w", err)
	}
	if len(resolved) > 0 && converged >= 0 {
		if converged, err = w.converge(ctx, lastFault, o.Converge); err != nil {
			return w.report(), err
		}
	}
	// Checked with every process still running: a straggler (a delayed
	// message whose receiver was killed) still gets applied while the
	// inbox check waits for it.
	rep := w.report()
	rep.Faults = f.counts
	rep.FaultLog = f.log
	rep.ProxyRestarts = f.proxyRestarts
	rep.Pauses = f.pauses
	rep.Resolved = resolved
	rep.Converged = converged
	err = w.check(ctx, rep)
	w.stopAll()
	if err != nil {
		return rep, err
	}
	w.keep = o.Keep || !rep.held()
	return rep, nil
}
