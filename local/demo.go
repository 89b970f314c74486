package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// runDemo runs the pipeline, drives n generations through the API to the
// end, prints a summary and fails when an invariant is broken.
func runDemo(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("local demo", flag.ContinueOnError)
	n := fs.Int("n", 20, "generations to submit")
	cancelShare := fs.Float64("cancel", 0.1, "share of generations cancelled right after submission")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up when generations are still running after this")
	renders := fs.Int("renders", 1, "final renders of a timeline of generated clips and an uploaded file, after the generations (0: none)")
	uploadFile := fs.String("upload", "", "the video file (with sound) to upload for the renders; one made with ffmpeg when empty")
	opts := defaultOptions()
	opts.apiAddr, opts.opsAddr = "127.0.0.1:0", "127.0.0.1:0"
	opts.logFormat = "json"
	opts.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return errors.New("-n must be at least 1")
	}
	if *renders < 0 {
		return errors.New("-renders must be 0 or more")
	}
	tracing, err := telemetry.SetupTracing(ctx, "aivedio-local")
	if err != nil {
		return err
	}
	defer tracing.Close()
	env, err := start(ctx, opts)
	if err != nil {
		return err
	}
	defer env.close()
	fmt.Printf("pipeline up (%s); state in %s (to start from nothing, stop it and: rm -rf %s); submitting %d generations\n",
		env.describe(), env.dataDir, env.dataDir, *n)

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
	facts := env.facts()
	facts.Failed = drive.FailedUnder(env.reviewSim, env.sim, env.runwaySim)
	rep, err := drive.Check(ctx, facts, res)
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
  failovers to another provider %d (remote jobs %d, most per task: %d)
  provider faults injected      429: %d, 5xx: %d, dropped answers: %d, failed jobs: %d
  duplicate deliveries absorbed %d (stale no-ops: %d)
  credits charged               %d
`, res.Elapsed.Round(time.Second), rep.ByStatus["SUCCEEDED"], rep.ByStatus["FAILED"], rep.ByStatus["CANCELED"]+rep.ByStatus["CANCELED_WITH_OUTPUT"],
		len(res.Tasks)-rep.ByStatus["SUCCEEDED"]-rep.ByStatus["FAILED"]-rep.ByStatus["CANCELED"]-rep.ByStatus["CANCELED_WITH_OUTPUT"],
		res.Canceled, rep.Attempts, rep.MaxJobsPerKey, rep.Failovers, rep.RemoteJobs, rep.MaxJobsPerTask,
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
	if *renders == 0 {
		return nil
	}
	return demoRenders(ctx, env, res, *renders, *uploadFile, *timeout)
}

// demoRenders uploads a file, renders a timeline of it and the generated
// clips, and prints each output's URL and probe facts.
func demoRenders(ctx context.Context, env *environment, gens drive.Result, n int, file string, timeout time.Duration) error {
	p := drive.Params{APIURL: env.apiURL, Key: env.devKey}
	clips, err := drive.OutputsOf(ctx, p, gens, 2)
	if err != nil {
		return err
	}
	if file == "" {
		dir, err := os.MkdirTemp("", "demo-upload-*")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		file = filepath.Join(dir, "upload.mp4")
		if err := makeClip(ctx, file); err != nil {
			return err
		}
	}
	fmt.Printf("\nrendering %d time(s) a timeline of %d generated clip(s) and %s\n", n, len(clips), file)
	res, err := drive.Renders(ctx, drive.RenderParams{APIURL: env.apiURL, Key: env.devKey, Clips: clips, Upload: file, N: n,
		Timeout: timeout, Pool: env.pool})
	if err != nil {
		return err
	}
	fmt.Printf("upload %s, revision %s (%.2f s)\n", res.UploadID, res.RevisionID, res.DurationSeconds)
	for _, r := range res.Renders {
		fmt.Printf("  render %s  %-18s %s reused=%t  %s %dx%d %s/%s\n    %s\n", r.ID, r.Profile, r.Status, r.Reused,
			r.Duration.Round(time.Millisecond), r.Width, r.Height, r.Video, r.Audio, r.URL)
	}
	fmt.Printf("renders done in %s\n", res.Elapsed.Round(time.Second))
	if len(res.Violations) > 0 {
		fmt.Println("\nRENDER INVARIANTS BROKEN:")
		for _, v := range res.Violations {
			fmt.Println("  -", v)
		}
		return fmt.Errorf("%d render invariant(s) broken: %w", len(res.Violations), drive.ErrInvariant)
	}
	fmt.Println("  every render invariant holds")
	return nil
}

// makeClip writes a 4 s 640x360 test video with a tone: the file a user
// would upload.
func makeClip(ctx context.Context, path string) error {
	out, err := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30:duration=4",
		"-f", "lavfi", "-i", "sine=frequency=440:duration=4", "-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", "-shortest", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("make the upload with ffmpeg: %w: %s", err, out)
	}
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
