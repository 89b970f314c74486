package media

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Deadlines applied when the caller's context has none. A caller with a
// deadline of its own (the usual case: the stage's remaining budget) gets
// exactly that deadline, longer or shorter.
const (
	DefaultProbeTimeout  = 2 * time.Minute
	DefaultDeriveTimeout = 30 * time.Minute
)

// waitDelay bounds how long a killed tool may hold its pipes open.
const waitDelay = 5 * time.Second

// Tool runs ffprobe and ffmpeg. It holds no state besides the binaries'
// paths and is safe for concurrent use; each call is one child process.
type Tool struct {
	ffmpeg  string
	ffprobe string
}

// New returns a Tool that runs the binaries named in cfg, looked up in PATH
// when they are bare names. Empty paths mean "ffmpeg" and "ffprobe".
func New(cfg config.Media) *Tool {
	t := &Tool{ffmpeg: cfg.FFmpegPath, ffprobe: cfg.FFprobePath}
	if t.ffmpeg == "" {
		t.ffmpeg = "ffmpeg"
	}
	if t.ffprobe == "" {
		t.ffprobe = "ffprobe"
	}
	return t
}

// withDefaultDeadline gives ctx a deadline d from now unless it has one.
func withDefaultDeadline(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// run executes one tool for operation op with stdin closed, stdout to w
// (discarded when nil) and the tail of stderr kept for the error. When ctx
// ends first the process is killed and the error wraps ctx's error (and its
// cause, if different). The child's CPU time is counted whatever the outcome.
func run(ctx context.Context, name, op, bin string, src source, args []string, w io.Writer) (err error) {
	if err := ctx.Err(); err != nil {
		return ctxError(ctx, name)
	}
	ctx, span := telemetry.Tracer().Start(ctx, name+" "+op, trace.WithAttributes(
		attribute.String("process.executable.name", name), attribute.String("aivedio.media_operation", op)))
	defer func() { telemetry.SpanError(span, err); span.End() }()
	stderr := newTailBuffer(StderrTail)
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout = w
	cmd.Stderr = stderr
	cmd.WaitDelay = waitDelay
	err = cmd.Run()
	countCPU(name, op, cmd.ProcessState)
	if ps := cmd.ProcessState; ps != nil {
		span.SetAttributes(attribute.Int("process.exit.code", ps.ExitCode()),
			attribute.Float64("aivedio.cpu_seconds", (ps.UserTime()+ps.SystemTime()).Seconds()))
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctxError(ctx, name)
	}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return &ExitError{
			Tool:     name,
			ExitCode: exitErr.ExitCode(),
			Stderr:   src.redact(stderr.String()),
			Err:      exitErr,
		}
	}
	return fmt.Errorf("run %s: %w", name, err)
}

func ctxError(ctx context.Context, name string) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	if cause == nil || errors.Is(cause, err) {
		return fmt.Errorf("%s interrupted: %w", name, err)
	}
	return fmt.Errorf("%s interrupted: %w: %w", name, err, cause)
}
