package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/shared/inbox"
)

// runDemo runs the pipeline, drives n generations through the API to the
// end, prints a summary and fails when an invariant is broken.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("local demo", flag.ContinueOnError)
	n := fs.Int("n", 20, "generations to submit")
	cancelShare := fs.Float64("cancel", 0.1, "share of generations cancelled right after submission")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up when generations are still running after this")
	opts := defaultOptions()
	opts.apiAddr = "127.0.0.1:0"
	opts.logFormat = "json"
	opts.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}
	env, err := start(ctx, opts)
	if err != nil {
		return err
	}
	defer env.close()
	fmt.Printf("pipeline up (%s); submitting %d generations\n", env.describe(), *n)

	progress := plainProgress()
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		progress = terminalProgress
	}
	res, runErr := drive.Run(ctx, drive.Params{APIURL: env.apiURL, Key: env.devKey, N: *n, Models: env.models,
		CancelShare: *cancelShare, Timeout: *timeout, Progress: progress})
	fmt.Println()
	if runErr != nil {
		return runErr
	}
	rep, err := drive.Check(ctx, drive.Facts{Pool: env.pool, Blob: env.blob, JobsByKey: env.sim.Stats().JobsByIdempotencyKey}, res)
	if err != nil {
		return err
	}
	stats := env.sim.Stats()
	counts := inbox.Totals()
	fmt.Printf(`
done in %s
  succeeded %d, failed %d, canceled %d, other %d
  cancel requests accepted      %d
  provider attempts             %d (most remote jobs per attempt key: %d)
  provider faults injected      429: %d, 5xx: %d, dropped answers: %d, failed jobs: %d
  duplicate deliveries absorbed %d (stale no-ops: %d)
  credits charged               %d
`, res.Elapsed.Round(time.Second), rep.ByStatus["SUCCEEDED"], rep.ByStatus["FAILED"], rep.ByStatus["CANCELED"]+rep.ByStatus["CANCELED_WITH_OUTPUT"],
		len(res.Tasks)-rep.ByStatus["SUCCEEDED"]-rep.ByStatus["FAILED"]-rep.ByStatus["CANCELED"]-rep.ByStatus["CANCELED_WITH_OUTPUT"],
		res.Canceled, rep.Attempts, rep.MaxJobsPerKey,
		stats.Faults.RateLimited, stats.Faults.ServerErrors, stats.Faults.Dropped, stats.Faults.FailedJobs,
		counts.Duplicates, counts.StaleNoops, rep.CreditsCharged)
	if len(rep.Violations) > 0 {
		fmt.Println("\nINVARIANTS BROKEN:")
		for _, v := range rep.Violations {
			fmt.Println("  -", v)
		}
		return fmt.Errorf("%d invariant(s) broken: %w", len(rep.Violations), drive.ErrInvariant)
	}
	fmt.Println("  every invariant holds")
	return nil
}

func summary(counts map[string]int) string {
	var parts []string
	for _, s := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", s, counts[s]))
	}
	return strings.Join(parts, "  ")
}

// terminalProgress redraws one line.
func terminalProgress(counts map[string]int, done, total int) {
	fmt.Printf("\r\033[K%d/%d done  %s", done, total, summary(counts))
}

// plainProgress prints a line when the counts change, at most every 2 s.
func plainProgress() func(map[string]int, int, int) {
	var last string
	var at time.Time
	return func(counts map[string]int, done, total int) {
		line := fmt.Sprintf("%d/%d done  %s", done, total, summary(counts))
		if line != last && (time.Since(at) > 2*time.Second || done == total) {
			fmt.Println(line)
			last, at = line, time.Now()
		}
	}
}
