package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/local/drive"
	"github.com/aivedio/pipeline/local/providersim"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
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

// checkObjects reads every asset of every SUCCEEDED task back from S3 and
// hashes it: what the row records is what the store holds.
func (w *world) checkObjects(ctx context.Context, r *report) error {
	rows, err := w.pool.Query(ctx, `SELECT t.task_id, t.missing_derivatives, a.kind, a.object_key, a.checksum_sha256, a.size_bytes,
			(SELECT s.audio_codec IS NOT NULL FROM assets s WHERE s.task_id = t.task_id AND s.kind = 'SOURCE')
		FROM generation_tasks t LEFT JOIN assets a USING (task_id) WHERE t.status = 'SUCCEEDED' ORDER BY t.task_id`)
	if err != nil {
		return err
	}
	type object struct {
		task    uuid.UUID
		missing []string
		kind    *string
		key     *string
		sum     []byte
		size    *int64
		audio   *bool
	}
	objects, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (object, error) {
		var o object
		err := row.Scan(&o.task, &o.missing, &o.kind, &o.key, &o.sum, &o.size, &o.audio)
		return o, err
	})
	if err != nil {
		return err
	}
	kinds := map[uuid.UUID][]string{}
	want := map[uuid.UUID][]string{}
	var problems []string
	read := 0
	for _, o := range objects {
		if _, ok := want[o.task]; !ok {
			k := []string{"PROXY", "SOURCE", "THUMBNAIL"}
			if o.audio != nil && *o.audio {
				k = append(k, "WAVEFORM")
			}
			want[o.task] = slices.DeleteFunc(k, func(s string) bool { return slices.Contains(o.missing, s) })
		}
		if o.kind == nil {
			continue
		}
		kinds[o.task] = append(kinds[o.task], *o.kind)
		body, _, err := w.blob.Open(ctx, *o.key)
		if err != nil {
			problems = append(problems, fmt.Sprintf("task %s %s %s: %v", o.task, *o.kind, *o.key, err))
			continue
		}
		h := sha256.New()
		n, err := io.Copy(h, body)
		_ = body.Close()
		read++
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("task %s %s: read: %v", o.task, *o.kind, err))
		case n != *o.size || hex.EncodeToString(h.Sum(nil)) != hex.EncodeToString(o.sum):
			problems = append(problems, fmt.Sprintf("task %s %s: the store holds %d bytes sha256 %x, the asset records %d bytes sha256 %x",
				o.task, *o.kind, n, h.Sum(nil), *o.size, o.sum))
		}
	}
	for task, k := range want {
		got := slices.Sorted(slices.Values(kinds[task]))
		slices.Sort(k)
		if !slices.Equal(got, k) {
			problems = append(problems, fmt.Sprintf("task %s SUCCEEDED with [%s], want [%s]", task, strings.Join(got, " "), strings.Join(k, " ")))
		}
	}
	r.add("each success has its objects, read back with their checksums", len(problems) == 0, "%d objects of %d successes read and hashed%s",
		read, len(want), firstOf(problems))
	return nil
}

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

func (w *world) checkOutbox(ctx context.Context, r *report) error {
	var unpublished, total int
	if err := w.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE published_at IS NULL), count(*) FROM outbox_events`).Scan(&unpublished, &total); err != nil {
		return err
	}
	r.add("no outbox row stuck", unpublished == 0, "%d of %d rows unpublished", unpublished, total)
	return nil
}

// inboxWait bounds the wait for the last consumers of events already due.
const inboxWait = time.Minute

// checkInbox proves each published event was applied by each consumer
// group that takes it: a row in that group's inbox (the inbox's key makes
// it once), or a quarantine row that says why not. notify keeps no inbox:
// its effect is a publish to Redis, at most once by design (the stream
// client drops repeats by version), so it is left out. An event still due
// in the future (a delayed poll of a task that ended meanwhile) is not yet
// anyone's to apply and is counted apart. So is a render chunk ask the
// render stage acknowledged without an inbox row by design (another
// delivery held the chunk's claim, or its own claim ran out while it was
// paused) whose render SUCCEEDED: that chunk's effect was recorded under
// the ask that claimed it (see heldChunkAsks).
func (w *world) checkInbox(ctx context.Context, r *report) error {
	deadline := time.Now().Add(inboxWait)
	for {
		missing, checked, future, held, err := w.inboxGaps(ctx)
		if err != nil {
			return err
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			r.add("every published event applied once by each of its consumer groups", len(missing) == 0,
				"%d deliveries checked against the inbox and the quarantine (notify, which keeps no inbox, left out; %d still due later; %s)%s",
				checked, future, heldChunkNote(held), firstOf(missing))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

func (w *world) inboxGaps(ctx context.Context) (missing []string, checked, future, held int, err error) {
	seen := map[string]bool{}
	rows, err := w.pool.Query(ctx, `SELECT consumer_name || '/' || event_id FROM inbox_dedup
		UNION SELECT consumer_name || '/' || event_id FROM message_quarantine WHERE event_id IS NOT NULL`)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var k string
	if _, err := pgx.ForEachRow(rows, []any{&k}, func() error { seen[k] = true; return nil }); err != nil {
		return nil, 0, 0, 0, err
	}
	heldChunks, err := w.heldChunkAsks(ctx)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	rows, err = w.pool.Query(ctx, `SELECT event_id::text, topic, tag, coalesce(deliver_at > now() - interval '5 seconds', false)
		FROM outbox_events WHERE published_at IS NOT NULL`)
	if err != nil {
		return nil, 0, 0, 0, err
	}
	var id, topic, tag string
	var later bool
	_, err = pgx.ForEachRow(rows, []any{&id, &topic, &tag, &later}, func() error {
		t, ok := catalog.TopicByName(topic)
		if !ok {
			missing = append(missing, fmt.Sprintf("event %s on unknown topic %s", id, topic))
			return nil
		}
		for _, g := range catalog.Groups() {
			if g.Name == catalog.GroupNotify.Name || !g.Takes(t, tag) {
				continue
			}
			if later {
				future++
				continue
			}
			checked++
			switch {
			case seen[g.Name+"/"+id]:
			case g.Name == catalog.GroupRender.Name && heldChunks[id]:
				held++
			default:
				missing = append(missing, fmt.Sprintf("%s never applied %s (%s %s)", g.Name, id, topic, tag))
			}
		}
		return nil
	})
	return missing, checked, future, held, err
}

// checkQuarantine explains every quarantine row. Under these faults the
// only explainable poison is a dead letter whose handler kept failing on a
// dependency (DEPENDENCY, with the handler's last error recorded), or an event that
// is no event of this run's (left on the shared broker by an earlier run,
// so its task is not in this database). A code defect, data defect or
// permission refusal is a bug: no such input was injected.
func (w *world) checkQuarantine(ctx context.Context, r *report) error {
	msgs, err := quarantine.List(ctx, w.pool, quarantine.Filter{Status: quarantine.AnyStatus, Limit: quarantine.MaxLimit})
	if err != nil {
		return err
	}
	ours := map[string]bool{}
	rows, err := w.pool.Query(ctx, `SELECT event_id::text FROM outbox_events`)
	if err != nil {
		return err
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { ours[id] = true; return nil }); err != nil {
		return err
	}
	var unexplained []string
	byWhy := map[string]int{}
	for _, m := range msgs {
		switch {
		case m.EventID != "" && !ours[m.EventID]:
			byWhy["an earlier run's event"]++
		case m.Category == quarantine.Dependency && m.LastErrorCode != "":
			byWhy[fmt.Sprintf("dead letter (%s) of %s", m.LastErrorCode, m.Consumer)]++
		default:
			unexplained = append(unexplained, fmt.Sprintf("%s %s %s %s: %s", m.Consumer, m.Category, m.ErrorCode, m.EventID, m.ErrorDetail))
		}
	}
	// An earlier run that broke (and so left its messages on the shared
	// broker) can quarantine many rows here; only this run's must all be
	// looked at.
	var total, thisRun int
	if err := w.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE q.event_id IS NULL
			OR EXISTS (SELECT 1 FROM outbox_events o WHERE o.event_id::text = q.event_id::text))
		FROM message_quarantine q`).Scan(&total, &thisRun); err != nil {
		return err
	}
	listed := 0
	for _, m := range msgs {
		if m.EventID == "" || ours[m.EventID] {
			listed++
		}
	}
	if thisRun > listed {
		unexplained = append(unexplained, fmt.Sprintf("%d rows of this run's events, %d of them not looked at: far more poison than these faults make", thisRun, thisRun-listed))
	}
	if total > len(msgs) {
		byWhy["an earlier run's event"] += total - len(msgs) - (thisRun - listed)
	}
	detail := fmt.Sprintf("%d rows", total)
	for _, why := range slices.Sorted(maps.Keys(byWhy)) {
		detail += fmt.Sprintf("; %s ×%d", why, byWhy[why])
	}
	r.add("every quarantine row explained", len(unexplained) == 0, "%s%s", detail, firstOf(unexplained))
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
