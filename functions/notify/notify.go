// Package notify is the notify stage: task.state.changed events (of tasks
// and of renders), consumed in order per task (a FIFO topic grouped by
// the task's or render's id), pushed to the
// tenant's server-sent-event subscribers through Redis pub/sub.
//
// Publishing never waits for a subscriber: one that is slow or absent
// misses the push (the API's stream drops it, not the chain), and the
// facts stay in task_events. Each version of a task is pushed once: a
// redelivered change, or one older than a version already pushed, is
// dropped by an atomic check of the task's last pushed version in Redis
// (live.PublishNewer); after Redis lost its data a repeat can reach
// clients, which drop versions they have seen. Notify keeps no inbox row:
// the version watermark is its idempotency, and skipping the database
// keeps this stage off the core chain's critical resource.
package notify

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// Name is the stage's name.
const Name = "notify"

// Params are what the stage needs.
type Params struct {
	Redis  redis.UniversalClient
	Logger *slog.Logger
}

// New returns the notify function.
func New(p Params) *stage.Function {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	work := func(ctx context.Context, ev envelope.Envelope, c task.StateChanged) error {
		if err := stage.CheckTenant(ev, c.TenantID); err != nil {
			return err
		}
		change := live.Change{EventID: ev.EventID, TaskID: c.TaskID, RenderID: c.RenderID, TenantID: c.TenantID,
			From: string(c.From), To: string(c.To), Version: c.Version, Progress: c.Progress, ErrorCode: c.ErrorCode, At: c.At}
		if (c.TaskID == uuid.Nil) == (c.RenderID == uuid.Nil) {
			return outcome.Permanentf("payload.invalid", "a state change names exactly one of task_id and render_id")
		}
		if change.Subject().String() != ev.AggregateID {
			return outcome.Permanentf("payload.invalid", "state change of %s arrived as an event about %s", change.Subject(), ev.AggregateID)
		}
		pushed, err := live.PublishNewer(ctx, p.Redis, change)
		if err == nil && !pushed {
			p.Logger.DebugContext(ctx, "state change not pushed: this or a newer version was pushed already",
				slog.String("subject", change.Subject().String()), slog.Int64("version", c.Version))
		}
		return err
	}
	return stage.Combine(stage.Params{Name: Name, Logger: p.Logger},
		stage.Stateless[task.StateChanged]{Work: work})
}
