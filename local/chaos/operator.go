package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// withoutLookup are the providers whose API cannot find a job by our
// request id (Runway): only there should a lost submit go to a person. At
// Replicate the lookup decides, and an outage only delays it.
var withoutLookup = map[string]bool{"runway": true}

// checkHandedOver holds the lookup to its promise: a lost submit goes to a
// person only at a provider without a lookup. At one with a lookup, an
// outage only delays the answer, and a chain that runs is progress, so a
// hand-over there is a rescue rule that gave up too soon.
func (w *world) checkHandedOver(r *report) {
	r.HandedOver = w.handedOver
	var where []string
	for provider, n := range w.handedOver {
		if !withoutLookup[provider] && n > 0 {
			where = append(where, fmt.Sprintf("%d at %s", n, provider))
		}
	}
	slices.Sort(where)
	if len(where) > 0 {
		r.add("lost submits handed to a person only where the provider has no lookup", false,
			"%s, which can look a job up (see the operator lines for why)", strings.Join(where, ", "))
		return
	}
	r.add("lost submits handed to a person only where the provider has no lookup", true, "%d handed over, all at %s (no lookup)", sumValues(w.handedOver), lookupless())
}

func sumValues(m map[string]int) (n int) {
	for _, v := range m {
		n += v
	}
	return n
}

func lookupless() string {
	var names []string
	for p := range withoutLookup {
		names = append(names, p)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Resolutions of the operator, by what it found.
const (
	resolvedJob       = "job found"
	resolvedNoJob     = "no job"
	resolvedAmbiguous = "left: several jobs"
)

// actAsOperator does what the on-call person does once the system has
// converged: each task in NEEDS_ATTENTION reconcile.submit_unknown lost
// its submit's answer at a provider that could not say whether it made a
// job (Runway has no lookup; a lookup chain that never got an answer). The
// person searches the provider's console, here the simulator, for a job
// with the task's prompt that no other attempt of the task already owns,
// and decides with `adapter tasks resolve`, audited in task_resolutions:
// --job when it found one, --no-job when it found none. Several would be
// a second paid job, which the remote-jobs invariant reports; those are
// left to a person. It returns how many it resolved, by what it found.
func (w *world) actAsOperator(ctx context.Context) (map[string]int, error) {
	rows, err := w.pool.Query(ctx, `SELECT t.task_id, t.prompt, a.provider, coalesce(t.error_message, ''),
			(SELECT coalesce(array_agg(o.provider_job_id), '{}') FROM task_attempts o
				WHERE o.task_id = t.task_id AND o.attempt_id <> a.attempt_id AND o.provider = a.provider AND o.provider_job_id IS NOT NULL)
		FROM generation_tasks t
		JOIN LATERAL (SELECT attempt_id, provider FROM task_attempts WHERE task_id = t.task_id AND status = 'SUBMIT_UNKNOWN'
			ORDER BY attempt_no DESC LIMIT 1) a ON true
		WHERE t.status = 'NEEDS_ATTENTION' AND t.error_code = 'reconcile.submit_unknown'
		ORDER BY t.task_id`)
	if err != nil {
		return nil, err
	}
	type lost struct {
		task, prompt, provider, why string
		owned                       []string
	}
	tasks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (lost, error) {
		var l lost
		err := row.Scan(&l.task, &l.prompt, &l.provider, &l.why, &l.owned)
		return l, err
	})
	if err != nil {
		return nil, err
	}
	done := map[string]int{}
	for _, l := range tasks {
		w.handedOver[l.provider]++
		var found []string
		for _, id := range w.provider(l.provider).sim.JobsWithPrompt(l.prompt) {
			if !slices.Contains(l.owned, id) {
				found = append(found, id)
			}
		}
		args := []string{"tasks", "resolve", l.task, "--ticket", fmt.Sprintf("chaos-%d", w.o.Seed), "--operator", "chaos"}
		var outcome string
		switch len(found) {
		case 0:
			args, outcome = append(args, "--no-job", "--reason", "no job with the task's prompt in "+l.provider+"'s console"), resolvedNoJob
		case 1:
			args, outcome = append(args, "--job", found[0], "--reason", "the job with the task's prompt in "+l.provider+"'s console"), resolvedJob
		default:
			done[resolvedAmbiguous]++
			continue
		}
		cmd := exec.CommandContext(ctx, filepath.Join(w.runDir, "bin", "adapter"), args...)
		cmd.Env = w.baseEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return done, fmt.Errorf("adapter %s: %w\n%s", strings.Join(args, " "), err, out)
		}
		fmt.Printf("chaos: operator resolved task %s (%s, handed over for: %s): %s\n", l.task, l.provider, l.why, outcome)
		done[outcome]++
	}
	return done, nil
}
