package reconcile_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// TestScanRescueContinuesTheTasksTrace: the event a rescue re-emits
// belongs to the trace of the request that created the task, as a child
// of the rescue's span, whose parent is that request's span. Not
// parallel: the tracer provider is process-wide.
func TestScanRescueContinuesTheTasksTrace(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	previous := otel.GetTracerProvider()
	telemetry.Install(provider)
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()); otel.SetTracerProvider(previous) })

	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Queued, 5*time.Minute)
	const traceID, requestSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET trace_parent = $2 WHERE task_id = $1`,
		stuck.ID, "00-"+traceID+"-"+requestSpan+"-01")
	require.NoError(t, err)

	_, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	var gotTrace, gotParent string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT trace_id, trace_parent FROM outbox_events WHERE event_type = $1`,
		catalog.EventSubmitRequested).Scan(&gotTrace, &gotParent))
	require.Equal(t, traceID, gotTrace, "the re-emitted submit is in the task's trace")

	var rescue *tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == "reconcile "+string(task.Queued) {
			rescue = &s
		}
	}
	require.NotNil(t, rescue)
	require.Equal(t, requestSpan, rescue.Parent.SpanID().String(), "the rescue is a child of the creating request")
	require.Equal(t, rescue.SpanContext.SpanID().String(), gotParent[36:52], "the event's handler will be the rescue's child")
}
