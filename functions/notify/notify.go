// Package notify is the notify stage: task.state.changed events, consumed
// in order per task (a FIFO topic grouped by task id), pushed to the
// tenant's server-sent-event subscribers through Redis pub/sub.
//
// Publishing never waits for a subscriber: one that is slow or absent
// misses the push (the API's stream drops it, not the chain), and the
// facts stay in task_events. A change may be pushed twice (the stage runs
// at least once per event); it carries its event id and task version so
// clients drop repeats. Notify keeps no inbox row: a push has no effect to
// protect, and skipping the database keeps this stage off the core chain's
// critical resource.
package notify

import (
	"context"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/catalog"
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
	work := func(ctx context.Context, ev envelope.Envelope) error {
		c, err := stage.Decode[task.StateChanged](ev)
		if err != nil {
			return err
		}
		if err := stage.CheckTenant(ev, c.TenantID); err != nil {
			return err
		}
		if c.TaskID.String() != ev.AggregateID {
			return outcome.Permanentf("payload.invalid", "state change of task %s arrived as an event about %s", c.TaskID, ev.AggregateID)
		}
		_, err = live.Publish(ctx, p.Redis, live.Change{EventID: ev.EventID, TaskID: c.TaskID, TenantID: c.TenantID,
			From: string(c.From), To: string(c.To), Version: c.Version, Progress: c.Progress, ErrorCode: c.ErrorCode, At: c.At})
		return err
	}
	return stage.New(stage.Params{Name: Name, EventTypes: []string{catalog.EventTaskStateChanged}, Work: work, Logger: p.Logger})
}
