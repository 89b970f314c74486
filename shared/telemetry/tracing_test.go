package telemetry_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"

	"github.com/aivedio/pipeline/shared/telemetry"
)

// TestSetupTracing: unset, nothing is exported but trace ids are still
// made and carried, sampled; an exporter named by OTEL_TRACES_EXPORTER exports; a
// name it does not know is an error that says which variable.
func TestSetupTracing(t *testing.T) {
	previous := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(previous) })
	for _, v := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
		t.Setenv(v, "")
	}

	off, err := telemetry.SetupTracing(t.Context(), "aivedio-test")
	require.NoError(t, err)
	require.False(t, off.Exporting)
	ctx, span := telemetry.Tracer().Start(context.Background(), "work")
	require.True(t, span.SpanContext().IsValid(), "ids are made without an exporter")
	tp, _ := telemetry.TraceParent(ctx)
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tp, "sampled, so that a downstream binary that exports records the trace")
	child, childSpan := telemetry.Tracer().Start(telemetry.WithTraceParent(context.Background(), tp, ""), "next hop")
	require.Equal(t, span.SpanContext().TraceID(), childSpan.SpanContext().TraceID(), "the trace carries across a traceparent")
	childTP, _ := telemetry.TraceParent(child)
	require.NotEqual(t, tp, childTP)
	off.Close()

	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	on, err := telemetry.SetupTracing(t.Context(), "aivedio-test")
	require.NoError(t, err)
	require.True(t, on.Exporting)
	_, span = telemetry.Tracer().Start(context.Background(), "work")
	require.True(t, span.IsRecording())
	require.NoError(t, on.Shutdown(t.Context()))

	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin-ish")
	_, err = telemetry.SetupTracing(t.Context(), "aivedio-test")
	require.ErrorContains(t, err, "OTEL_TRACES_EXPORTER")
}
