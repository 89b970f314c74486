package replay_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// TestReplayLinksToTheOriginal: a replay's event starts in the trace of
// the operator's request, in a span linked to the span that produced the
// original event, so the two traces lead to each other. Not parallel: the
// tracer provider is process-wide.
func TestReplayLinksToTheOriginal(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	previous := otel.GetTracerProvider()
	telemetry.Install(provider)
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()); otel.SetTracerProvider(previous) })

	b := setup(t)
	tk, _ := b.taskAt(t, b.tenant(t), task.Succeeded)
	settle := event(t, tk, catalog.EventSettleRequested, task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded})
	settle.TraceParent = "00-" + settle.TraceID + "-00f067aa0ba902b7-01"
	b.quarantine(t, deadLetter(t, catalog.GroupSettle, settle))
	plan, err := b.desk.Plan(t.Context(), replay.Ref{ID: uuid.MustParse(settle.EventID)}, "alice")
	require.NoError(t, err)
	_, err = b.desk.Approve(t.Context(), plan.ReplayID, approval)
	require.NoError(t, err)

	ctx, operator := telemetry.Tracer().Start(t.Context(), "POST /v1/admin/replays/{id}/execute")
	_, err = b.desk.Execute(ctx, plan.ReplayID, "carol")
	operator.End()
	require.NoError(t, err)

	sent := b.replays(t, settle.EventID)
	require.Len(t, sent, 1)
	require.Equal(t, operator.SpanContext().TraceID().String(), sent[0].Envelope.TraceID, "the replayed event is in the operator's trace")
	var replaySpan *tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if s.Name == "replay "+catalog.EventSettleRequested {
			replaySpan = &s
		}
	}
	require.NotNil(t, replaySpan)
	require.Equal(t, operator.SpanContext().SpanID(), replaySpan.Parent.SpanID())
	require.Equal(t, replaySpan.SpanContext.SpanID().String(), sent[0].Envelope.TraceParent[36:52], "its handler will be the replay span's child")
	require.Len(t, replaySpan.Links, 1)
	link := replaySpan.Links[0].SpanContext
	require.Equal(t, settle.TraceID, link.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", link.SpanID().String(), "linked to the original event's producing span")
}
