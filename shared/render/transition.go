package render

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// Aggregate is the render as the aggregate of its events.
func (j Job) Aggregate() task.Aggregate {
	return task.Aggregate{Type: task.RenderAggregateType, ID: j.ID, TenantID: j.TenantID}
}

// Ask is the event asking the render stage for step of j (chunk: which).
func (j Job) Ask(o task.Origin, step string, chunk int) (outbox.Event, error) {
	return o.EmitFor(j.Aggregate(), task.RenderRequested{RenderID: j.ID, Step: step, Chunk: chunk})
}

// AskLater is Ask for a chunk put off until at (a business wait), the
// waits-th time.
func (j Job) AskLater(o task.Origin, chunk, waits int, at time.Time) (outbox.Event, error) {
	return o.EmitForAt(j.Aggregate(), task.RenderRequested{RenderID: j.ID, Step: task.RenderChunk, Chunk: chunk, SlotWaits: waits}, at)
}

// Apply moves cur by ch in tx and writes, in the same transaction, the
// render's state change for its subscribers when its status changed, the
// settle of its reservation when it ended, and events. It returns the
// render as changed; [ErrStale] when cur moved since it was read.
func Apply(ctx context.Context, tx pgx.Tx, o task.Origin, cur Job, ch Change, events ...outbox.Event) (Job, error) {
	j, err := Move(ctx, tx, cur, ch)
	if err != nil {
		return Job{}, err
	}
	if j.Status != cur.Status {
		changed, err := Changed(o, j, cur.Status)
		if err != nil {
			return Job{}, err
		}
		events = append(events, changed)
	}
	if j.Status.Terminal() && !cur.Status.Terminal() {
		settle, err := o.EmitFor(j.Aggregate(), task.SettleRequested{RenderID: j.ID, Status: task.Status(j.Status)})
		if err != nil {
			return Job{}, err
		}
		events = append(events, settle)
	}
	return j, outbox.Write(ctx, tx, events...)
}

// Changed is the state change event of j, which came from from (empty:
// j was just created).
func Changed(o task.Origin, j Job, from Status) (outbox.Event, error) {
	return o.EmitFor(j.Aggregate(), task.StateChanged{RenderID: j.ID, TenantID: j.TenantID, From: task.Status(from),
		To: task.Status(j.Status), Version: j.Version, Progress: j.Progress, ErrorCode: j.ErrorCode, At: j.UpdatedAt})
}
