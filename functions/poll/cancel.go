package poll

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// cancelJob asks the provider to stop a running job the client canceled and
// records the outcome in the inbox-protected transaction.
func (s *poller) cancelJob(ctx context.Context, ev envelope.Envelope, consumer string, t task.Task, attemptID uuid.UUID) error {
	cctx, cancel := context.WithTimeout(ctx, s.Timeout)
	job, err := s.Provider.Cancel(cctx, t.ProviderJobID)
	cancel()
	outcome := stage.DecideCancel(job, err)
	log := s.Logger.With(slog.String("task_id", t.ID.String()), slog.String("event_id", ev.EventID))
	log.InfoContext(ctx, "provider cancel", slog.String("outcome", string(outcome)), slog.String("provider_class", string(provider.ClassOf(err))))
	o := task.FromEnvelope(Name, ev)
	var released bool
	_, err = inbox.Do(ctx, s.Pool, consumer, ev, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		released = false
		cur, err := task.Lock(ctx, tx, t.ID)
		if err != nil {
			return "", err
		}
		if cur.Status != task.ProviderRunning || cur.ProviderJobID != t.ProviderJobID {
			return inbox.StaleNoop, nil
		}
		released = outcome != stage.CancelUnknown
		return inbox.Applied, stage.ApplyCancel(ctx, tx, o, cur, attemptID, outcome, s.Journey.ReconcileAfter)
	})
	if err == nil && released {
		stage.ReleaseSlots(ctx, s.Slots, stage.GenerationSlots(t, t.Provider, s.Journey), log)
	}
	return err
}
