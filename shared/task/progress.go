package task

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// ProgressMerge is one live progress value offered to the stored one by
// [MergeProgress].
type ProgressMerge struct {
	TaskID uuid.UUID
	// JobID is the provider job the value is of: a value of another job
	// than the task's current one is not merged.
	JobID   string
	Percent int // clamped to 0..100
	// Step and Interval are the merge rule: the value is stored when it
	// is at least Step points above the stored one, or Interval has
	// passed since the last merge (or the task's last transition, before
	// the first merge).
	Step     int
	Interval time.Duration
	// Final stores any value above the stored one: the job ended.
	Final bool
}

// MergeProgress stores m.Percent as the task's progress when the rule of m
// says so, and reports whether it did. It is not a transition: it changes
// no state, bumps no version (delayed events that expect the version stay
// valid), leaves updated_at alone (the poll interval and the reconciler's
// scans read it) and announces nothing. It only raises the stored value
// and only while the task is PROVIDER_RUNNING with job m.JobID, so a late
// or out-of-order value, or one for a task that moved on, changes nothing.
// The time of a merge is progress_updated_at, PostgreSQL's clock, so the
// interval holds across processes.
func MergeProgress(ctx context.Context, q Querier, m ProgressMerge) (bool, error) {
	percent := max(0, min(100, m.Percent))
	tag, err := q.Exec(ctx, `UPDATE generation_tasks SET progress = $2, progress_updated_at = now()
		WHERE task_id = $1 AND status = $3 AND provider_job_id = $4 AND progress < $2
		AND ($5 OR $2 - progress >= $6
			OR greatest(progress_updated_at, updated_at) <= now() - $7 * interval '1 microsecond')`,
		m.TaskID, percent, ProviderRunning, m.JobID, m.Final, m.Step, m.Interval.Microseconds())
	if err != nil {
		return false, fmt.Errorf("merge progress of task %s: %w", m.TaskID, err)
	}
	return tag.RowsAffected() == 1, nil
}
