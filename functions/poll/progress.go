package poll

import (
	"context"
	"log/slog"
	"time"

	"github.com/aivedio/pipeline/shared/progress"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// progressTimeout bounds recording one poll's progress (Redis, and
// PostgreSQL when it merges).
const progressTimeout = 5 * time.Second

// recordProgress records what job says of its progress: in Redis on every
// poll, in the task row by PROGRESS_MERGE_STEP or PROGRESS_MERGE_INTERVAL,
// and when the job ended (before the transition that ends it). Best
// effort: a value not recorded is logged, and the poll goes on.
func (s *poller) recordProgress(ctx context.Context, log *slog.Logger, t task.Task, job provider.Job) {
	ctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	p := progress.Params{Pool: s.Pool, Redis: s.Redis, Rule: progress.RuleOf(s.Journey), TTL: s.Journey.PollMax * 3}
	if _, err := progress.Record(ctx, p, t, job.Progress, job.Status.Terminal()); err != nil {
		log.WarnContext(ctx, "progress not recorded", slog.String("error", err.Error()))
	}
}
