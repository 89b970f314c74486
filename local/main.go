// Command local runs the whole pipeline in one process:
//
//	go run ./local              the API, every stage behind its source
//	                            adapter, the relay, the provider simulator
//	go run ./local demo -n 20   the same, plus 20 generations driven through
//	                            the API until they end, and a summary
//
// Each service is real when its variable is set and embedded otherwise:
// DATABASE_URL (else an embedded PostgreSQL), ROCKETMQ_ENDPOINT (else the
// in-process broker emulator), REDIS_URL (else miniredis), S3_ENDPOINT
// (else an embedded S3 server). The provider simulator always runs; its
// fault knobs are flags and PROVIDERSIM_* variables.
//
// The embedded services keep all of their state in LOCAL_DATA_DIR (Redis
// aside, which only mirrors PostgreSQL), so a run killed at any moment,
// kill -9 included, starts again by itself and goes on where it was; the
// banner says where the folder is and how to wipe it. As root, the
// embedded PostgreSQL's processes run as nobody.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/aivedio/pipeline/shared/telemetry"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	var err error
	switch {
	case len(args) > 0 && args[0] == "demo":
		err = runDemo(ctx, args[1:])
	case len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help"):
		usage()
	default:
		err = runServe(ctx, args)
	}
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  go run ./local [flags]             run the pipeline; prints the API address, a dev key and a curl
  go run ./local demo -n 20 [flags]  run it and drive 20 generations to the end, then check invariants

Services: DATABASE_URL, ROCKETMQ_ENDPOINT, REDIS_URL, S3_ENDPOINT select real ones;
unset, each is embedded. Simulator knobs: go run ./local -h lists them.
`)
}

func runServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("local", flag.ContinueOnError)
	opts := defaultOptions()
	opts.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
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
	fmt.Printf(`
AiVedio pipeline is running (%s).

  API        %s
  dev key    %s
  simulator  %s  (stats: %s/sim/stats)%s
  ops        %s/metrics, %s/healthz, %s/readyz  (every stage, adapter and the API)
  traces     %s
%s
Try:
  curl -s -X POST %s/v1/generations \
    -H 'Authorization: Bearer %s' -H 'Idempotency-Key: demo-1' -H 'Content-Type: application/json' \
    -d '{"model":"%s","prompt":"a red fox running through snow","duration_seconds":4,"resolution":"1280x720"}'
  curl -s %s/v1/generations/<task_id> -H 'Authorization: Bearer %s'
  curl -sN %s/v1/events -H 'Authorization: Bearer %s'

Upload a file of your own (PUT it to upload.url with every upload.headers, then complete):
  curl -s -X POST %s/v1/assets \
    -H 'Authorization: Bearer %s' -H 'Idempotency-Key: upload-1' -H 'Content-Type: application/json' \
    -d "{\"kind\":\"VIDEO\",\"content_type\":\"video/mp4\",\"size_bytes\":$(stat -c %%s clip.mp4),\"sha256\":\"$(sha256sum clip.mp4 | cut -d' ' -f1)\",\"filename\":\"clip.mp4\"}"
  curl -s -X POST %s/v1/assets/<asset_id>/complete -H 'Authorization: Bearer %s'
  curl -s %s/v1/assets -H 'Authorization: Bearer %s'

Render a timeline of READY assets (the output is one more asset; the same content again is reused, and free):
  curl -s -X POST %s/v1/projects -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' -d '{"name":"launch"}'
  curl -s -X POST %s/v1/projects/<project_id>/revisions -H 'Authorization: Bearer %s' -H 'Content-Type: application/json' \
    -d '{"timeline":{"clips":[{"asset_id":"<asset_id>","in":0,"out":4},{"asset_id":"<asset_id>","in":1,"out":5,"transition_in":{"type":"dissolve","duration":1}}],"titles":[{"text":"Launch day","start":0.5,"end":3}]}}'
  curl -s -X POST %s/v1/renders -H 'Authorization: Bearer %s' -H 'Idempotency-Key: render-1' -H 'Content-Type: application/json' \
    -d '{"project_revision_id":"<revision_id>","profile":"1080p30-h264"}'
  curl -s %s/v1/renders/<render_id> -H 'Authorization: Bearer %s'

Ctrl-C stops everything.
`, env.describe(), env.apiURL, env.devKey, env.simURL, env.simURL, env.runwayLine(), env.opsURL, env.opsURL, env.opsURL, tracesLine(tracing), env.stateLines(), env.apiURL, env.devKey, env.models[0], env.apiURL, env.devKey, env.apiURL, env.devKey,
		env.apiURL, env.devKey, env.apiURL, env.devKey, env.apiURL, env.devKey,
		env.apiURL, env.devKey, env.apiURL, env.devKey, env.apiURL, env.devKey, env.apiURL, env.devKey)
	return env.wait(ctx)
}

// stateLines say where the embedded services keep their state and how
// to start again from nothing, and how to reach the embedded PostgreSQL
// and S3 server directly.
func (e *environment) stateLines() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  state      %s (%s)\n", e.dataDir, e.describeState())
	fmt.Fprintf(&b, "             kept across restarts, kill -9 included; to start from nothing, stop the program and: rm -rf %s\n", e.dataDir)
	if e.volatile != "" {
		fmt.Fprintf(&b, "             %s\n", e.volatile)
	}
	if e.dbURL != "" {
		fmt.Fprintf(&b, "  database   %s  (psql it)\n", e.dbURL)
	}
	if e.s3URL != "" {
		fmt.Fprintf(&b, "  objects    %s  (S3, access key local, secret local-secret)\n", e.s3URL)
	}
	return b.String()
}

// tracesLine says where spans go, or the one line that shows them.
func tracesLine(t *telemetry.Tracing) string {
	if t.Exporting {
		return "exported as OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_* say (one trace per generation and per render)"
	}
	return "off; to see one trace per generation and per render: OTEL_TRACES_EXPORTER=console make run (spans as JSON on stdout), or OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 to a collector"
}
