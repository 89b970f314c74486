package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName names the pipeline's own spans.
const InstrumentationName = "github.com/aivedio/pipeline"

// Tracer is the pipeline's tracer from the global provider that
// [SetupTracing] installs (a no-op one until then, as in unit tests).
func Tracer() trace.Tracer { return otel.Tracer(InstrumentationName) }

// Tracing is what [SetupTracing] installed.
type Tracing struct {
	// Exporting reports whether spans leave the process; when false, trace
	// ids are still made and carried (the API returns one, every event
	// keeps it) but the spans go nowhere.
	Exporting bool
	provider  *sdktrace.TracerProvider
}

// Shutdown flushes the spans not exported yet and stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down tracing: %w", err)
	}
	return nil
}

// Close shuts the provider down within five seconds, dropping what it
// could not export by then: for a deferred call at exit.
func (t *Tracing) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = t.provider.Shutdown(ctx)
}

// SetupTracing installs the global tracer provider and the W3C trace
// context and baggage propagators, configured by the standard OTEL_*
// variables: spans are exported when OTEL_TRACES_EXPORTER names an
// exporter (otlp, console) or an OTLP endpoint is set
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), with
// the protocol of OTEL_EXPORTER_OTLP_PROTOCOL and the sampler of
// OTEL_TRACES_SAMPLER. Otherwise, and with OTEL_SDK_DISABLED=true, spans
// go nowhere but trace ids are still generated and propagated, sampled,
// so that a downstream binary that exports records them. The service name
// is service unless OTEL_SERVICE_NAME says otherwise.
func SetupTracing(ctx context.Context, service string) (*Tracing, error) {
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES override
		resource.WithTelemetrySDK(),
		resource.WithHost(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing resource: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	exporting := false
	if exportConfigured() {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing exporter (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*): %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			exporting = true
			opts = append(opts, sdktrace.WithBatcher(exp))
		}
	}
	if !exporting {
		// No span processor: spans end nowhere. They are still sampled, so
		// the traceparent this process passes on lets the next process,
		// if it exports, record the trace: tracing is set per binary.
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())))
	}
	provider := sdktrace.NewTracerProvider(opts...)
	Install(provider)
	return &Tracing{Exporting: exporting, provider: provider}, nil
}

// Install makes provider the global tracer provider, with the W3C trace
// context and baggage propagators that otelhttp reads and writes headers
// with; a test installs its own in-memory one this way.
func Install(provider trace.TracerProvider) {
	otel.SetTracerProvider(provider)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
}

// exportConfigured reports whether the environment asks for spans to be
// exported. autoexport alone would default to OTLP on localhost.
func exportConfigured() bool {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if v := os.Getenv("OTEL_TRACES_EXPORTER"); v != "" {
		return v != "none"
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// traceContext is the W3C propagator of the trace context alone, for the
// traceparent and tracestate an event carries.
var traceContext propagation.TraceContext

// WithTraceParent returns ctx with the remote span of a W3C traceparent
// and tracestate as its parent; ctx unchanged when traceparent is empty or
// malformed.
func WithTraceParent(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent, "tracestate": tracestate})
}

// TraceParent is the W3C traceparent and tracestate of ctx's span; empty
// when ctx has no valid span.
func TraceParent(ctx context.Context) (traceparent, tracestate string) {
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	return carrier["traceparent"], carrier["tracestate"]
}

// StartContinued starts a span named name whose parent is the stored
// traceparent (the span of the request that created an aggregate), linked
// to ctx's own span: for work that arrives without the aggregate's trace
// but belongs to it. With no stored traceparent the span is ctx's child.
func StartContinued(ctx context.Context, stored, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if stored == "" {
		return Tracer().Start(ctx, name, trace.WithAttributes(attrs...))
	}
	link := trace.LinkFromContext(ctx)
	parent := WithTraceParent(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), stored, "")
	return Tracer().Start(parent, name, trace.WithLinks(link), trace.WithAttributes(attrs...))
}

// SpanError records err on span and marks the span failed.
func SpanError(span trace.Span, err error) {
	if err == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}
