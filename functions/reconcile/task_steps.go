package reconcile

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/asset"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

// The steps the [TaskRescuer] re-emits, one per state it rescues.

func (s *TaskRescuer) submit(_ context.Context, _ pgx.Tx, t task.Task) ([]outbox.Event, error) {
	e, err := scanOrigin.Emit(t, task.SubmitRequested{TaskID: t.ID, Version: t.Version + 1})
	return []outbox.Event{e}, err
}

// lostPoll re-emits the live poll chain's message: the same poll_at, so if
// the lost one turns up after all, one of the two is stale.
func (s *TaskRescuer) lostPoll(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	a, err := attempt.OfJob(ctx, tx, t.ID, t.ProviderJobID)
	if errors.Is(err, attempt.ErrNotFound) {
		return nil, errNoAttempt
	}
	if err != nil {
		return nil, err
	}
	e, err := scanOrigin.Emit(t, task.PollDue{TaskID: t.ID, AttemptID: a.ID, PollAt: *t.NextPollAt})
	return []outbox.Event{e}, err
}

func (s *TaskRescuer) lostFetch(_ context.Context, _ pgx.Tx, t task.Task) ([]outbox.Event, error) {
	e, err := scanOrigin.Emit(t, task.FetchRequested{TaskID: t.ID})
	return []outbox.Event{e}, err
}

// lostMedia re-emits only what is missing: the probe when the output was
// never probed, else the derivatives that do not exist yet.
func (s *TaskRescuer) lostMedia(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	assetID, err := asset.OutputOf(ctx, tx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("output of task in media processing: %w", err)
	}
	source, err := stage.ReadAsset(ctx, tx, t, assetID)
	if err != nil {
		return nil, err
	}
	steps := []string{catalog.TagProbe}
	if source.Probed {
		have, err := asset.DerivativeKinds(ctx, tx, assetID)
		if err != nil {
			return nil, err
		}
		steps = nil
		for _, step := range stage.DerivativeSteps(source.HasAudio) {
			if !slices.Contains(have, asset.Kind(catalog.DerivativeKind(step))) {
				steps = append(steps, step)
			}
		}
	}
	var events []outbox.Event
	for _, step := range steps {
		e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: assetID, Step: step})
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	// An open content review whose next call is long overdue lost its
	// REVIEW (with a broker): re-emitted at the attempt its chain is at,
	// so that a late original is a no-op. One waiting on schedule is left
	// alone; REVIEW_MAX_WAIT bounds that wait.
	if source.Probed {
		open, overdue, err := review.Overdue(ctx, tx, t.ID, time.Now().Add(-s.p.Journey.StuckAfter))
		if err != nil {
			return nil, err
		}
		if overdue {
			e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: open.AssetID, Step: catalog.TagReview,
				Wait: task.Wait{RetryAttempt: open.Attempts}})
			if err != nil {
				return nil, err
			}
			events = append(events, e)
		}
	}
	return events, nil
}

// lostLookup restarts the lookup of a lost submit, a bounded number of
// times.
//
// It gives up only as every rescue does, after MaxRescues restarts the
// lookup stage took without the task moving or being touched since: each
// lookup touches the task, so a chain that runs, however slowly (its
// consumer deaf, its function paused), is progress, and ends by itself
// (found, not found, or RECONCILE_MAX_ROUNDS answers that said nothing).
func (s *TaskRescuer) lostLookup(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	lost, err := attempt.Latest(ctx, tx, t.ID, attempt.SubmitUnknown)
	if errors.Is(err, attempt.ErrNotFound) {
		return nil, errGiveUp
	}
	if err != nil {
		return nil, err
	}
	e, err := scanOrigin.Emit(t, task.ReconcileDue{TaskID: t.ID, AttemptID: lost.ID, Wait: task.Wait{Reason: "scanner: lookup chain lost"}})
	return []outbox.Event{e}, err
}

// lostCancelLook restarts the look at a canceled job whose outcome is
// unknown, a bounded number of times.
func (s *TaskRescuer) lostCancelLook(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	// Every lookup the rescuer restarted that the lookup stage took,
	// progress or not: each ran a whole chain of lookups.
	rescues, err := takenRescues(ctx, tx, t.ID, catalog.EventReconcileDue, false)
	if err != nil {
		return nil, err
	}
	if rescues >= s.cfg.MaxRescues {
		return nil, errGiveUp
	}
	canceled, err := attempt.OfJob(ctx, tx, t.ID, t.ProviderJobID)
	if errors.Is(err, attempt.ErrNotFound) {
		return nil, errNoAttempt
	}
	if err != nil {
		return nil, err
	}
	e, err := scanOrigin.Emit(t, task.ReconcileDue{TaskID: t.ID, AttemptID: canceled.ID, Wait: task.Wait{Reason: task.ReasonCancel}})
	return []outbox.Event{e}, err
}
