// Package stage is the part every stage function shares: it turns an
// incoming CloudEvent into a validated envelope, refuses events the stage
// does not handle, runs the stage's work, and reports the outcome in the
// terms the source adapter acts on (docs/design.md §6).
//
// # Outcomes
//
//   - nil from the work: HTTP 200, the adapter ACKs. Duplicates and stale
//     no-ops are successes too.
//   - an invalid envelope, an event type the stage does not handle, or work
//     that returns an outcome.Permanent error: a 4xx (400 for the envelope,
//     422 for the rest). The adapter quarantines the message and ACKs.
//   - anything else: a 5xx. The adapter retries with backoff.
//
// Over HTTP ([HTTPHandler]) a failure's answer carries its class and code in
// an outcome.Body, so the quarantine row names the stage's reason.
//
// # Typed stages
//
// [NewTyped] builds a stage on one event type whose payload is about one
// task, and [Combine] one of several: the framework decodes the payload
// (additive fields tolerated, required ones enforced), reads the task,
// refuses another tenant's, and records a stale no-op when the event's
// task.Wait no longer holds or the stage's Acts says the task no longer
// needs it. The stage's work gets a [Delivery] with all of it, a locked
// step ([Delivery.Locked]) in the inbox transaction, and after-commit
// hooks ([Delivery.AfterCommit]) for what must follow the commit (freeing
// slots). Every stage that keeps its state in PostgreSQL is a typed stage.
//
// # Metrics
//
// Every Handle is timed into aivedio_stage_work_duration_seconds{stage,
// outcome}, process-wide: see [Collector].
//
// # Tracing
//
// Every Handle runs in a span named "<stage> <event type>", a child of the
// event's traceparent (the source adapter's delivery span); the inbox
// transaction, provider and S3 calls, ffmpeg runs and the events the work
// writes hang below it.
//
// A Function is safe for concurrent use when its WorkFunc is.
package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// WorkFunc does a stage's work for one validated event. It must be
// idempotent: the same event may arrive more than once.
type WorkFunc func(ctx context.Context, ev envelope.Envelope) error

// Params configures a Function.
type Params struct {
	Name       string   // stage name, e.g. "submit"
	EventTypes []string // event types the stage handles
	Work       WorkFunc
	// Triggers handle system events that carry no envelope, by CloudEvent
	// type: a periodic PingSource tick names no tenant or task.
	Triggers map[string]TriggerFunc
	Logger   *slog.Logger
}

// TriggerFunc handles a system event; its error is reported like a
// WorkFunc's.
type TriggerFunc func(ctx context.Context, ev event.Event) error

// Function is a func-go instanced CloudEvents function for one stage.
type Function struct {
	params Params
	timers workTimers
}

// New returns the function of one stage. It panics on a programming error
// (no name, no event types, no work).
func New(p Params) *Function {
	if p.Name == "" || len(p.EventTypes) == 0 || p.Work == nil {
		panic("stage.New: Name, EventTypes and Work are required")
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	return &Function{params: p, timers: newWorkTimers(p.Name)}
}

// Name is the stage's name.
func (f *Function) Name() string { return f.params.Name }

// Handle validates ev and runs the stage's work. The returned error is a
// CloudEvents HTTP result whose status code tells the adapter what to do.
func (f *Function) Handle(ctx context.Context, ev event.Event) (_ *event.Event, err error) {
	start := time.Now()
	ctx, span := f.span(ctx, ev)
	defer func() { telemetry.SpanError(span, err); span.End() }()
	log := f.params.Logger.With(slog.String("stage", f.params.Name), slog.String("event_id", ev.ID()), slog.String("event_type", ev.Type()))
	if trigger, ok := f.params.Triggers[ev.Type()]; ok {
		return nil, f.result(ctx, log, start, trigger(ctx, ev))
	}
	env, err := envelope.FromCloudEvent(ev)
	if err != nil {
		class, _ := envelope.ClassOf(err)
		log.WarnContext(ctx, "invalid envelope", slog.String("error_class", string(class)), slog.String("error", err.Error()))
		since(f.timers.permanent, start)
		return nil, cehttp.NewResult(http.StatusBadRequest, "%w", outcome.Permanent("envelope."+string(class), err))
	}
	if !slices.Contains(f.params.EventTypes, env.EventType) {
		err := fmt.Errorf("stage %s does not handle event type %q (it handles %s)", f.params.Name, env.EventType, strings.Join(f.params.EventTypes, ", "))
		log.WarnContext(ctx, "event type not handled", slog.String("error", err.Error()))
		since(f.timers.permanent, start)
		return nil, cehttp.NewResult(http.StatusUnprocessableEntity, "%w", outcome.Permanent("event.type_not_handled", err))
	}
	log = log.With(slog.String("tenant_id", env.TenantID))
	return nil, f.result(ctx, log, start, f.params.Work(ctx, env))
}

// span starts the stage's span of one event, a child of the span that
// delivered it (the event's traceparent).
func (f *Function) span(ctx context.Context, ev event.Event) (context.Context, trace.Span) {
	tp, _ := ev.Extensions()[envelope.ExtTraceParent].(string)
	ts, _ := ev.Extensions()[envelope.ExtTraceState].(string)
	tenant, _ := ev.Extensions()[envelope.ExtTenantID].(string)
	return telemetry.Tracer().Start(telemetry.WithTraceParent(ctx, tp, ts), f.params.Name+" "+ev.Type(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("aivedio.stage", f.params.Name),
			attribute.String("cloudevents.event_id", ev.ID()),
			attribute.String("cloudevents.event_type", ev.Type()),
			attribute.String("cloudevents.event_subject", ev.Subject()),
			attribute.String("aivedio.tenant_id", tenant),
			semconv.MessagingOperationTypeProcess))
}

// result maps a work or trigger error to the CloudEvents HTTP result the
// adapter acts on (nil; 422 permanent; 503 deadline; 500 otherwise) and
// times the call.
func (f *Function) result(ctx context.Context, log *slog.Logger, start time.Time, err error) error {
	if err != nil {
		class, code := outcome.Of(err)
		log.WarnContext(ctx, "stage work failed", slog.String("error_class", string(class)), slog.String("error_code", code), slog.String("error", err.Error()))
		if class == outcome.ClassPermanent {
			since(f.timers.permanent, start)
			return cehttp.NewResult(http.StatusUnprocessableEntity, "%w", err)
		}
		status := http.StatusInternalServerError
		if errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusServiceUnavailable
		}
		since(f.timers.retryable, start)
		return cehttp.NewResult(status, "%w", err)
	}
	since(f.timers.ok, start)
	return nil
}
