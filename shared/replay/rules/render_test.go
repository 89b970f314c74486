package rules

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// A render event is refused for replay, with the reason and where to look.
func TestRenderRefusesRenderEvents(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	ev, err := task.Origin{Producer: "test"}.EmitFor(task.Aggregate{Type: task.RenderAggregateType, ID: id, TenantID: uuid.New()},
		task.RenderRequested{RenderID: id, Step: task.RenderChunk, Chunk: 2})
	require.NoError(t, err)
	_, v := Render().Parse(ev.Envelope)
	require.NotNil(t, v)
	require.Equal(t, preview.Refuse, v.Action)
	require.Equal(t, "replay.render", v.Code)
	require.Contains(t, v.Reason, "GET /v1/renders/"+id.String())
}
