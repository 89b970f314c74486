// Package progress keeps a running generation task's progress: live in
// Redis on every poll, merged into PostgreSQL by step or interval (seed
// 7.8.2: not a database write per poll), so that what a client was shown
// outlives Redis.
//
// # Guarantees
//
//   - [Record] writes Redis on every call and PostgreSQL only when the value
//     rose at least [Rule.Step] points above the stored one, or
//     [Rule.Interval] passed since the last merge and the value rose, or
//     the job ended. The merge is [task.MergeProgress]: no version bump, no
//     timeline row, never lower than stored, only while the task is
//     PROVIDER_RUNNING with the job polled. Calling it twice, late or out
//     of order is harmless.
//   - [Of] is what a reader shows: for a running task the larger of the
//     live value and the stored one, the stored one when Redis has none
//     (it expired, or Redis lost its data) or does not answer. After a
//     Redis restart a client sees at most the progress made since the last
//     merge go missing, never 0 for a task that had progressed.
//
// Both are best effort towards Redis: its errors are returned for the
// caller to log and never fail a poll or a read.
package progress

import (
	"cmp"
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/task"
)

// Rule is when a live value is merged into PostgreSQL.
type Rule struct {
	Step     int           // points above the stored value; 0: PROGRESS_MERGE_STEP's default
	Interval time.Duration // since the last merge; 0: PROGRESS_MERGE_INTERVAL's default
}

// RuleOf is the rule j configures.
func RuleOf(j config.Journey) Rule {
	return Rule{Step: j.ProgressStep, Interval: j.ProgressInterval}
}

func (r Rule) withDefaults() Rule {
	return Rule{Step: cmp.Or(r.Step, config.DefaultProgressStep), Interval: cmp.Or(r.Interval, config.DefaultProgressInterval)}
}

// Params are what [Record] writes to.
type Params struct {
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient // nil: PostgreSQL only
	Rule  Rule
	TTL   time.Duration // of the live value
}

// Record records percent as the progress of t's job (t.ProviderJobID): in
// Redis, and in PostgreSQL when p.Rule (or final, the job ended) says so.
// merged reports the PostgreSQL write. A Redis error does not stop the
// merge; both errors are returned, joined.
func Record(ctx context.Context, p Params, t task.Task, percent int, final bool) (merged bool, err error) {
	var liveErr error
	if p.Redis != nil {
		liveErr = live.SetProgress(ctx, p.Redis, t.ID, percent, p.TTL)
	}
	r := p.Rule.withDefaults()
	merged, err = task.MergeProgress(ctx, p.Pool, task.ProgressMerge{TaskID: t.ID, JobID: t.ProviderJobID, Percent: percent,
		Step: r.Step, Interval: r.Interval, Final: final})
	if merged {
		merges.Inc()
	}
	return merged, errors.Join(liveErr, err)
}

// Of is the progress to show of t as read from PostgreSQL: for a
// PROVIDER_RUNNING task the larger of its live value in rdb and
// t.Progress, t.Progress otherwise, without a live value, and when Redis
// fails (err says why).
func Of(ctx context.Context, rdb redis.UniversalClient, t task.Task) (int, error) {
	if t.Status != task.ProviderRunning || rdb == nil {
		return t.Progress, nil
	}
	p, ok, err := live.Progress(ctx, rdb, t.ID)
	if err != nil || !ok {
		return t.Progress, err
	}
	return max(p, t.Progress), nil
}
