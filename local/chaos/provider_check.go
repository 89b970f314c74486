package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/catalog"
)

// This file holds the invariant of the providers: at most one remote job
// per task.

// checkRemoteJobs counts the remote jobs both simulators started against
// what PostgreSQL recorded. Every generation has a prompt of its own, so
// the simulators' per-prompt counts, summed, say how many jobs each task
// made wherever it ran: one at most, whatever failed over. Every job must
// also belong to an attempt committed before its call: at Replicate by the
// attempt's idempotency key, at Runway (which takes no key) by an attempt
// of the prompt's task there.
func (w *world) checkRemoteJobs(ctx context.Context, r *report) error {
	type attempt struct{ provider, key, prompt, status string }
	rows, err := w.pool.Query(ctx, `SELECT a.provider, a.provider_idempotency_key, t.prompt, a.status
		FROM task_attempts a JOIN generation_tasks t USING (task_id)`)
	if err != nil {
		return err
	}
	attempts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (attempt, error) {
		var a attempt
		err := row.Scan(&a.provider, &a.key, &a.prompt, &a.status)
		return a, err
	})
	if err != nil {
		return err
	}
	r.AttemptsBy = map[string]int{}
	keyed := map[string]bool{}     // provider/idempotency key
	attempted := map[string]bool{} // provider/prompt
	for _, a := range attempts {
		r.AttemptsBy[a.provider]++
		if a.status == "ABANDONED" {
			r.Failovers++
		}
		keyed[a.provider+"/"+a.key] = true
		attempted[a.provider+"/"+a.prompt] = true
	}
	var problems []string
	perTask := map[string]int{}
	r.Jobs, r.JobsBy, r.SimFaults = 0, map[string]int{}, nil
	for _, p := range w.providers {
		stats := p.sim.Stats()
		r.Jobs += stats.JobsCreated
		r.JobsBy[p.name] = stats.JobsCreated
		r.SimFaults = append(r.SimFaults, simFaults(p))
		for prompt, n := range stats.JobsByPrompt {
			perTask[prompt] += n
			if !attempted[p.name+"/"+prompt] {
				problems = append(problems, fmt.Sprintf("%s: %d jobs for %q, whose task has no attempt there", p.name, n, prompt))
			}
		}
		for k, n := range stats.JobsByIdempotencyKey {
			switch {
			case !keyed[p.name+"/"+k]:
				problems = append(problems, fmt.Sprintf("%s: %d jobs under key %s, which no attempt records", p.name, n, k))
			case n > 1:
				problems = append(problems, fmt.Sprintf("%s: %d jobs under key %s", p.name, n, k))
			}
		}
		if stats.UntrackedKeys > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d jobs past the simulator's tracked keys", p.name, stats.UntrackedKeys))
		}
	}
	worst := 0
	for prompt, n := range perTask {
		worst = max(worst, n)
		if n > 1 {
			problems = append(problems, fmt.Sprintf("%d remote jobs for %q across the providers", n, prompt))
		}
	}
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE event_type = $1`, catalog.EventReconcileDue).Scan(&r.Lookups); err != nil {
		return err
	}
	slices.Sort(problems)
	r.add("at most one remote job per attempt key, and per generation across providers", len(problems) == 0,
		"%d attempts (%d abandoned for a failover), %d remote jobs, at most %d per generation%s",
		len(attempts), r.Failovers, r.Jobs, worst, firstOf(problems))
	return nil
}
