package task_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// TestEmitRoutesEveryPayload: each payload names its event type, topic and
// tag, sent now and due later, and the event passes the outbox's checks
// (a DELAY topic needs a delivery time, a FIFO topic a message group).
func TestEmitRoutesEveryPayload(t *testing.T) {
	t.Parallel()
	tk := task.Task{ID: uuid.New(), TenantID: uuid.New()}
	id := tk.ID
	later := time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
	cases := []struct {
		payload      task.Message
		eventType    string
		now, delayed catalog.Topic
		tag          string
	}{
		{task.SubmitRequested{TaskID: id}, catalog.EventSubmitRequested, catalog.GenerationSubmit, catalog.GenerationSubmitDelay, catalog.EventSubmitRequested},
		{task.PollDue{TaskID: id, AttemptID: id}, catalog.EventPollDue, catalog.GenerationPollDelay, catalog.GenerationPollDelay, catalog.EventPollDue},
		{task.CallbackReceived{Provider: "p", ProviderJobID: "j"}, catalog.EventCallbackReceived, catalog.GenerationCallback, catalog.GenerationCallback, catalog.EventCallbackReceived},
		{task.FetchRequested{TaskID: id}, catalog.EventFetchRequested, catalog.AssetFetch, catalog.AssetFetchDelay, catalog.EventFetchRequested},
		{task.Postprocess{TaskID: id, AssetID: id, Step: catalog.TagThumbnail}, catalog.EventPostprocess, catalog.AssetPostprocess, catalog.AssetPostprocessDelay, catalog.TagThumbnail},
		{task.Postprocess{TaskID: id, AssetID: id, Step: catalog.TagReview}, catalog.EventPostprocess, catalog.AssetPostprocess, catalog.AssetPostprocessDelay, catalog.TagReview},
		{task.RenderRequested{RenderID: id, Step: task.RenderChunk, Chunk: 1}, catalog.EventRenderRequested, catalog.RenderExport, catalog.RenderExportDelay, catalog.EventRenderRequested},
		{task.SettleRequested{TaskID: id, Status: task.Succeeded}, catalog.EventSettleRequested, catalog.BillingSettle, catalog.BillingSettle, catalog.EventSettleRequested},
		{task.StateChanged{TaskID: id, TenantID: tk.TenantID, To: task.Queued}, catalog.EventTaskStateChanged, catalog.GenerationStateFIFO, catalog.GenerationStateFIFO, catalog.EventTaskStateChanged},
		{task.ReconcileDue{TaskID: id, AttemptID: id}, catalog.EventReconcileDue, catalog.ReconcileDelay, catalog.ReconcileDelay, catalog.EventReconcileDue},
	}
	o := task.Origin{Producer: "test", EventID: uuid.NewString()}
	for _, c := range cases {
		t.Run(c.eventType+"/"+c.tag, func(t *testing.T) {
			t.Parallel()
			now, err := o.Emit(tk, c.payload)
			require.NoError(t, err)
			at, err := o.EmitAt(tk, c.payload, later)
			require.NoError(t, err)
			for _, e := range []struct {
				ev    outbox.Event
				topic catalog.Topic
			}{{now, c.now}, {at, c.delayed}} {
				require.Equal(t, c.eventType, e.ev.Envelope.EventType)
				require.Equal(t, e.topic, e.ev.Topic)
				tag := e.ev.Tag
				if tag == "" {
					tag = e.ev.Envelope.EventType
				}
				require.Equal(t, c.tag, tag)
				require.Equal(t, o.EventID, e.ev.Envelope.CausationID)
				require.Equal(t, id.String(), e.ev.Envelope.AggregateID)
				require.Equal(t, e.topic.Type == catalog.Delay, !e.ev.DeliverAt.IsZero(), "a delivery time exactly on DELAY topics")
				require.Equal(t, e.topic.Type == catalog.FIFO, e.ev.MessageGroup != "", "a message group exactly on FIFO topics")
			}
			if c.delayed.Type == catalog.Delay {
				require.Equal(t, later, at.DeliverAt)
			}
		})
	}
}
