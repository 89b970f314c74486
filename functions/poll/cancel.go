package poll

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// cancelJob asks the provider to stop a running job the client canceled and
// records the outcome in the inbox-protected transaction; a known outcome
// frees the task's slots after the commit.
func cancelJob[T any](ctx context.Context, s *poller, d stage.Delivery[T], attemptID uuid.UUID) error {
	t := d.Task
	c, err := stage.ProviderOf(s.Providers, t.Provider)
	if err != nil {
		return d.Escalate(ctx, err, func(context.Context) { releaseSlots(s, d) })
	}
	cctx, cancel := context.WithTimeout(ctx, s.Timeout)
	job, err := c.Cancel(cctx, t.ProviderJobID)
	cancel()
	outcome := stage.DecideCancel(job, err)
	d.Log.InfoContext(ctx, "provider cancel", slog.String("outcome", string(outcome)), slog.String("provider_class", string(provider.ClassOf(err))))
	return d.Apply(ctx, runningJob(t), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		if outcome != stage.CancelUnknown {
			releaseSlots(s, d)
		}
		return aggregate.Applied, stage.ApplyCancel(ctx, tx, d.Origin, cur, attemptID, outcome, s.Journey.ReconcileAfter)
	})
}
