package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/task"
)

// explainedAttention are the reasons these faults can hand a task to a
// person for: a provider whose answer was dropped stayed unknown through
// every lookup (an outage during them). A task the reconciler gave up on
// for no progress, or for a missing attempt, is a defect.
var explainedAttention = []string{"reconcile.submit_unknown", "reconcile.cancel_unknown"}

// terminalStates are the task states nothing moves on from.
var terminalStates = []string{"SUCCEEDED", "FAILED", "CANCELED", "CANCELED_WITH_OUTPUT", "NEEDS_ATTENTION"}

// report is what a run prints.
type report struct {
	Seed       int64
	N          int
	RunDir     string
	Database   string
	Faults     map[string]int
	FaultLog   []string
	Deaths     map[string]int // process exits the supervisor did not ask for, by kind
	Converged  time.Duration  // from the end of the last fault until every task was terminal and settled
	ByStatus   map[string]int
	Renders    map[string]int // renders by status
	Reused     int            // renders that ended with an output stored before
	Attempts   int
	AttemptsBy map[string]int // by provider
	Failovers  int            // attempts abandoned to another provider
	Jobs       int
	Lookups    int            // lookups of lost submits asked for (task.reconcile.due events)
	JobsBy     map[string]int // by provider
	SimFaults  []string       // per provider
	Review     string
	// ProxyRestarts are the proxy restarts, each with how long every
	// consumer stayed deaf after it (checkProxyRecovery).
	ProxyRestarts []proxyRestart
	// Pauses are the processes stopped and for how long.
	Pauses []pause
	// Resolved counts the operator's decisions on lost submits, by what it
	// found (actAsOperator).
	Resolved   map[string]int
	HandedOver map[string]int // lost submits in NEEDS_ATTENTION when the operator looked, by provider
	Invariants []invariant
}

// invariant is one line of the verdict.
type invariant struct {
	Name   string
	Held   bool
	Detail string
}

func (r *report) held() bool {
	if len(r.Invariants) == 0 {
		return false
	}
	for _, inv := range r.Invariants {
		if !inv.Held {
			return false
		}
	}
	return true
}

func (r *report) add(name string, held bool, format string, args ...any) {
	r.Invariants = append(r.Invariants, invariant{Name: name, Held: held, Detail: fmt.Sprintf(format, args...)})
}

func (w *world) report() *report {
	deaths := map[string]int{}
	for _, p := range w.procs {
		deaths[p.kind] += p.deathCount()
	}
	return &report{Seed: w.o.Seed, N: w.o.N, RunDir: w.runDir, Database: w.database, Deaths: deaths, ByStatus: map[string]int{},
		Renders: map[string]int{}}
}

// converge waits until every task and render is terminal, no outbox row
// waits and no terminal task or render holds its reservation, and says how
// long that took after lastFault.
func (w *world) converge(ctx context.Context, lastFault time.Time, within time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(within)
	var open, unpublished, held, rendering, renderHeld int
	for {
		err := w.pool.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM generation_tasks WHERE NOT status = ANY($1)),
				(SELECT count(*) FROM outbox_events WHERE published_at IS NULL),
				(SELECT count(*) FROM credit_reservations r JOIN generation_tasks t USING (task_id)
					WHERE r.status = 'HELD' AND t.status <> 'NEEDS_ATTENTION'),
				(SELECT count(*) FROM render_jobs WHERE NOT status = ANY($2)),
				(SELECT count(*) FROM credit_reservations r JOIN render_jobs j USING (render_job_id)
					WHERE r.status = 'HELD' AND j.status = ANY($2))`, terminalStates, renderTerminal).
			Scan(&open, &unpublished, &held, &rendering, &renderHeld)
		if err == nil && open == 0 && unpublished == 0 && held == 0 && rendering == 0 && renderHeld == 0 {
			return max(time.Since(lastFault), 0), nil
		}
		if time.Now().After(deadline) {
			fmt.Printf("chaos: not converged %s after the last fault: %d tasks and %d renders not terminal, %d outbox rows unpublished, %d reservations held by tasks, %d by finished renders\n",
				within, open, rendering, unpublished, held, renderHeld)
			return -1, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// check fills the verdict from PostgreSQL, S3 and the simulator.
func (w *world) check(ctx context.Context, r *report) error {
	tasks := w.taskIDs()
	r.add("every generation accepted", len(tasks) == w.o.N, "%d of %d created through the API", len(tasks), w.o.N)
	if r.Converged >= 0 {
		r.add("converged after the last fault", true, "in %s", r.Converged.Round(100*time.Millisecond))
	} else {
		r.add("converged after the last fault", false, "not within %s", w.o.Converge)
	}
	w.checkHandedOver(r)
	for _, step := range []func(context.Context, *report) error{
		w.checkTerminal, w.checkFailed, w.checkSettlement, w.checkCaptures, w.checkObjects, w.checkReview, w.checkReviewer, w.checkRenders, w.checkRemoteJobs, w.checkOutbox, w.checkInbox, w.checkQuarantine,
		w.checkProxyRecovery,
	} {
		if err := step(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

func (w *world) checkTerminal(ctx context.Context, r *report) error {
	open, unexplained := 0, 0
	rows, err := w.pool.Query(ctx, `SELECT status, count(*),
			count(*) FILTER (WHERE status = 'NEEDS_ATTENTION' AND (coalesce(error_code, '') = '' OR coalesce(error_message, '') = ''))
		FROM generation_tasks GROUP BY status`)
	if err != nil {
		return err
	}
	var status string
	var n, bad int
	_, err = pgx.ForEachRow(rows, []any{&status, &n, &bad}, func() error {
		r.ByStatus[status] = n
		if !slices.Contains(terminalStates, status) {
			open += n
		}
		unexplained += bad
		return nil
	})
	if err != nil {
		return err
	}
	var reasons []string
	rows, err = w.pool.Query(ctx, `SELECT coalesce(error_code, ''), count(*) FROM generation_tasks WHERE status = 'NEEDS_ATTENTION' GROUP BY 1 ORDER BY 2 DESC`)
	if err != nil {
		return err
	}
	var code string
	_, err = pgx.ForEachRow(rows, []any{&code, &n}, func() error {
		reasons = append(reasons, fmt.Sprintf("%s ×%d", code, n))
		if !slices.Contains(explainedAttention, code) {
			unexplained += n
		}
		return nil
	})
	if err != nil {
		return err
	}
	detail := "all terminal"
	if len(reasons) > 0 {
		detail += "; needs attention: " + strings.Join(reasons, ", ")
	}
	if open > 0 || unexplained > 0 {
		detail = fmt.Sprintf("%d not terminal, %d NEEDS_ATTENTION for a reason the faults do not explain (%s)", open, unexplained, strings.Join(reasons, ", "))
	}
	r.add("every task terminal (NEEDS_ATTENTION with its reason)", open == 0 && unexplained == 0, "%s", detail)
	return w.pool.QueryRow(ctx, `SELECT count(*) FROM task_attempts`).Scan(&r.Attempts)
}

// checkFailed holds every FAILED task to the faults the run injects: a
// code they do not explain (drive.FailedUnder: a failed job, a content
// refusal by a provider or by the reviewer) is a defect, whatever else
// the run survived.
func (w *world) checkFailed(ctx context.Context, r *report) error {
	sims := make([]*providersim.Server, 0, len(w.providers))
	for _, p := range w.providers {
		sims = append(sims, p.sim)
	}
	allowed := drive.FailedUnder(w.reviewer, sims...)
	rows, err := w.pool.Query(ctx, `SELECT coalesce(error_code, ''), count(*) FROM generation_tasks
		WHERE status = 'FAILED' GROUP BY 1 ORDER BY 2 DESC, 1`)
	if err != nil {
		return err
	}
	var failed, unexplained []string
	var code string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&code, &n}, func() error {
		failed = append(failed, fmt.Sprintf("%s ×%d", code, n))
		if !slices.Contains(allowed, code) {
			unexplained = append(unexplained, fmt.Sprintf("%q ×%d", code, n))
		}
		return nil
	})
	if err != nil {
		return err
	}
	detail := fmt.Sprintf("failed: %s; the faults explain %v", cmp.Or(strings.Join(failed, ", "), "none"), allowed)
	if len(unexplained) > 0 {
		detail = fmt.Sprintf("%s FAILED for a reason the faults do not explain (they explain %v)", strings.Join(unexplained, ", "), allowed)
	}
	r.add("every FAILED task failed for a reason the faults explain", len(unexplained) == 0, "%s", detail)
	return nil
}

func (w *world) checkSettlement(ctx context.Context, r *report) error {
	var wrong, held, accounts int
	// Charged: a success, and a failure the content review made (the
	// provider made and billed the video: task.Task.Charged). Every other
	// failure is released, the provider's own content refusal included.
	var charged, reviewRejected int
	err := w.pool.QueryRow(ctx, `WITH c AS (
			SELECT t.status, r.status AS reservation,
				t.status IN ('SUCCEEDED', 'CANCELED_WITH_OUTPUT') OR (t.status = 'FAILED' AND coalesce(t.error_code, '') = $1) AS charged,
				t.status = 'FAILED' AND coalesce(t.error_code, '') = $1 AS review_rejected,
				(SELECT count(*) FROM credit_ledger l WHERE l.ledger_business_type = 'CAPTURE' AND l.business_id = r.reservation_id::text) AS captures
			FROM generation_tasks t LEFT JOIN credit_reservations r USING (task_id))
		SELECT
			count(*) FILTER (WHERE (charged AND (reservation IS DISTINCT FROM 'CAPTURED' OR captures <> 1))
				OR (NOT charged AND status IN ('FAILED', 'CANCELED') AND (reservation IS DISTINCT FROM 'RELEASED' OR captures <> 0))),
			count(*) FILTER (WHERE reservation = 'HELD' AND status <> 'NEEDS_ATTENTION'),
			count(*) FILTER (WHERE charged), count(*) FILTER (WHERE review_rejected)
		FROM c`, task.ErrContentRejected).Scan(&wrong, &held, &charged, &reviewRejected)
	if err != nil {
		return err
	}
	r.add("exactly one capture per charged task, none per other failure", wrong == 0,
		"%d tasks charged wrongly; %d charged (%d of them rejected by the content review)", wrong, charged, reviewRejected)
	// The books: each balance is its ledger's sum, each reserved amount
	// what its held reservations add up to.
	err = w.pool.QueryRow(ctx, `SELECT count(*) FROM credit_accounts a
		WHERE a.balance <> (SELECT coalesce(sum(amount), 0) FROM credit_ledger l WHERE l.tenant_id = a.tenant_id)
		   OR a.reserved <> (SELECT coalesce(sum(amount), 0) FROM credit_reservations r WHERE r.tenant_id = a.tenant_id AND r.status = 'HELD')`).Scan(&accounts)
	if err != nil {
		return err
	}
	r.add("every reservation settled, the books balanced", held == 0 && accounts == 0,
		"%d held by a finished task, %d accounts whose balance or reserved amount disagrees with the ledger", held, accounts)
	return nil
}

// firstOf is ": " and the first few problems, for a detail cell.
func firstOf(problems []string) string {
	if len(problems) == 0 {
		return ""
	}
	shown := problems[:min(3, len(problems))]
	more := ""
	if len(problems) > len(shown) {
		more = fmt.Sprintf(" (and %d more)", len(problems)-len(shown))
	}
	return ": " + strings.Join(shown, "; ") + more
}

func (r *report) print(out io.Writer) {
	fmt.Fprintf(out, "\nCHAOS seed %d: %d generations\n\n", r.Seed, r.N)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FAULT\tCOUNT")
	total := 0
	for _, k := range strings.Split(allKinds, ",") {
		fmt.Fprintf(tw, "%s\t%d\n", k, r.Faults[k])
		total += r.Faults[k]
	}
	fmt.Fprintf(tw, "total\t%d\n", total)
	_ = tw.Flush()
	fmt.Fprintf(out, "\nprocess exits restarted: %v\n", r.Deaths)
	fmt.Fprintf(out, "tasks: %v; %d attempts %v (%d failovers), %d remote jobs %v\n", r.ByStatus, r.Attempts, r.AttemptsBy, r.Failovers, r.Jobs, r.JobsBy)
	fmt.Fprintf(out, "remote jobs per generation: %.3f on average; lookups of lost submits: %d; lost submits the operator resolved (adapter tasks resolve): %v\n",
		float64(r.Jobs)/float64(max(r.N, 1)), r.Lookups, r.Resolved)
	fmt.Fprintf(out, "renders: %v; %d reused\n", r.Renders, r.Reused)
	for _, f := range r.SimFaults {
		fmt.Fprintf(out, "provider faults, %s\n", f)
	}
	if r.Review != "" {
		fmt.Fprintf(out, "content review: %s\n", r.Review)
	}
	if len(r.ProxyRestarts) > 0 {
		fmt.Fprintln(out)
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PROXY BACK	DOWN	GROUPS	GROUP DEAF (MEAN)	GROUP DEAF (MAX)	SLOWEST GROUP	CONSUMERS	CONSUMER DEAF (MAX)	SLOWEST CONSUMER")
		for _, p := range r.ProxyRestarts {
			n, mean, worst, slowest := p.deafness(true)
			cn, _, cworst, cslowest := p.deafness(false)
			fmt.Fprintf(tw, "%s	%s	%d	%s	%s	%s	%d	%s	%s\n", p.Back.Format(time.TimeOnly), p.Back.Sub(p.Began).Round(100*time.Millisecond),
				n, mean.Round(10*time.Millisecond), worst.Round(10*time.Millisecond), slowest, cn, cworst.Round(10*time.Millisecond), cslowest)
		}
		_ = tw.Flush()
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tHELD\tDETAIL")
	for _, inv := range r.Invariants {
		mark := "yes"
		if !inv.Held {
			mark = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", inv.Name, mark, inv.Detail)
	}
	_ = tw.Flush()
	if r.held() {
		fmt.Fprintln(out, "\nevery invariant held")
	} else {
		fmt.Fprintln(out, "\nINVARIANTS BROKEN")
	}
}

// checkReview holds the content review's product rule under the faults:
// review is on from the start, so every success passed an approving review
// and no output went out unreviewed, whatever the reviewer's outages; every
// rejection failed its task with the review's code and stopped serving its
// outputs.
func (w *world) checkReview(ctx context.Context, r *report) error {
	var unreviewed, notApproved, rejected, rejectedServed, waited, malformed int
	err := w.pool.QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE t.status = 'SUCCEEDED' AND v.task_id IS NULL),
			count(*) FILTER (WHERE t.status = 'SUCCEEDED' AND v.status IS DISTINCT FROM 'APPROVED'),
			count(*) FILTER (WHERE t.status = 'FAILED' AND t.error_code = $1 AND v.status = 'REJECTED'),
			count(*) FILTER (WHERE t.status = 'FAILED' AND t.error_code = $1 AND (v.status IS DISTINCT FROM 'REJECTED'
				OR EXISTS (SELECT 1 FROM assets a WHERE a.task_id = t.task_id AND a.status <> 'FAILED'))),
			count(*) FILTER (WHERE v.waiting_since IS NOT NULL),
			coalesce(sum(v.malformed), 0)
		FROM generation_tasks t LEFT JOIN task_reviews v USING (task_id)`, task.ErrContentRejected).
		Scan(&unreviewed, &notApproved, &rejected, &rejectedServed, &waited, &malformed)
	if err != nil {
		return err
	}
	st := w.reviewer.Stats()
	r.Review = fmt.Sprintf("%d calls: %d approved, %d rejected, %d 503s, %d 429s, %d malformed, %d refused while down",
		st.Requests, st.Approved, st.Rejected, st.Errors5xx, st.Throttled, st.Malformed, st.Refused)
	r.add("every success approved by the content review, every rejection failed and not served",
		unreviewed == 0 && notApproved == 0 && rejectedServed == 0,
		"%d successes without a review, %d not approved; %d rejected, %d of them still served or not REJECTED; %d reviews waited on the reviewer (%d malformed answers)",
		unreviewed, notApproved, rejected, rejectedServed, waited, malformed)
	return nil
}
