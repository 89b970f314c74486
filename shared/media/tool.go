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

// Deadlines applied when the caller's context has none; a run's own bound
// from its work ([DeadlineError]) applies within it. ffprobe is never given
// longer than DefaultProbeTimeout: it reads a header and an index, whatever
// the input's length.
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
	// timeoutFactor and timeoutMin give a derivative's ffmpeg run its
	// deadline ([Tool.workDeadline]).
	timeoutFactor int
	timeoutMin    time.Duration
}

// Defaults of a derivative's deadline: MEDIA_TIMEOUT_FACTOR times its
// input's duration, at least MEDIA_TIMEOUT_MIN.
const (
	DefaultTimeoutFactor = 12
	DefaultTimeoutMin    = time.Minute
)

// DeadlineError is an ffmpeg or ffprobe run killed past the deadline its
// work gave it: Work long an input (zero: a fixed bound) let it run Limit.
type DeadlineError struct {
	Tool, Op string
	Limit    time.Duration
	Work     time.Duration
}

func (e *DeadlineError) Error() string {
	if e.Work > 0 {
		return fmt.Sprintf("%s %s killed past its deadline of %s (for an input of %s)", e.Tool, e.Op, e.Limit, e.Work.Round(time.Millisecond))
	}
	return fmt.Sprintf("%s %s killed past its deadline of %s", e.Tool, e.Op, e.Limit)
}

// withWorkDeadline bounds ctx for one run of tool that e describes, and
// names the run when the bound is what ends it.
func withWorkDeadline(ctx context.Context, e *DeadlineError) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, e.Limit, e)
}

// workDeadline is how long a derivative's ffmpeg run over an input lasting
// d may take: d times the factor, at least the floor; [DefaultDeriveTimeout]
// when d is unknown.
func (t *Tool) workDeadline(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultDeriveTimeout
	}
	return max(t.timeoutMin, d*time.Duration(t.timeoutFactor))
}

// New returns a Tool that runs the binaries named in cfg, looked up in PATH
// when they are bare names. Empty paths mean "ffmpeg" and "ffprobe".
func New(cfg config.Media) *Tool {
	t := &Tool{ffmpeg: cfg.FFmpegPath, ffprobe: cfg.FFprobePath, timeoutFactor: cfg.MediaTimeoutFactor, timeoutMin: cfg.MediaTimeoutMin}
	if t.timeoutFactor < 1 {
		t.timeoutFactor = DefaultTimeoutFactor
	}
	if t.timeoutMin <= 0 {
		t.timeoutMin = DefaultTimeoutMin
	}
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
