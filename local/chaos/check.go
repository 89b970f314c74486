package main

import (
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

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
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
	Jobs       int
	SimFaults  string
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
	for _, step := range []func(context.Context, *report) error{
		w.checkTerminal, w.checkSettlement, w.checkObjects, w.checkRenders, w.checkRemoteJobs, w.checkOutbox, w.checkInbox, w.checkQuarantine,
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

func (w *world) checkSettlement(ctx context.Context, r *report) error {
	var wrong, held, accounts int
	err := w.pool.QueryRow(ctx, `WITH c AS (
			SELECT t.status, r.status AS reservation,
				(SELECT count(*) FROM credit_ledger l WHERE l.ledger_business_type = 'CAPTURE' AND l.business_id = r.reservation_id::text) AS captures
			FROM generation_tasks t LEFT JOIN credit_reservations r USING (task_id))
		SELECT
			count(*) FILTER (WHERE (status IN ('SUCCEEDED', 'CANCELED_WITH_OUTPUT') AND (reservation IS DISTINCT FROM 'CAPTURED' OR captures <> 1))
				OR (status IN ('FAILED', 'CANCELED') AND (reservation IS DISTINCT FROM 'RELEASED' OR captures <> 0))),
			count(*) FILTER (WHERE reservation = 'HELD' AND status <> 'NEEDS_ATTENTION')
		FROM c`).Scan(&wrong, &held)
	if err != nil {
		return err
	}
	r.add("exactly one capture per success, none per failure", wrong == 0, "%d tasks charged wrongly", wrong)
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

func (w *world) checkRemoteJobs(ctx context.Context, r *report) error {
	stats := w.sim.Stats()
	r.Jobs = stats.JobsCreated
	f := stats.Faults
	r.SimFaults = fmt.Sprintf("%d 429s, %d 503s, %d dropped answers, %d failed jobs, %d outputs not ready",
		f.RateLimited, f.ServerErrors, f.Dropped, f.FailedJobs, f.OutputNotReady)
	rows, err := w.pool.Query(ctx, `SELECT provider_idempotency_key FROM task_attempts`)
	if err != nil {
		return err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	var dup []string
	worst := 0
	recorded := map[string]bool{}
	for _, k := range keys {
		recorded[k] = true
	}
	// Every remote job the provider started, whatever its key: an attempt
	// is committed before its call, so a job under a key no attempt
	// records is a submit that was never recorded.
	for k, n := range stats.JobsByIdempotencyKey {
		worst = max(worst, n)
		switch {
		case !recorded[k]:
			dup = append(dup, fmt.Sprintf("%s: %d jobs under a key no attempt records", k, n))
		case n > 1:
			dup = append(dup, fmt.Sprintf("%s: %d jobs", k, n))
		}
	}
	if stats.UntrackedKeys > 0 {
		dup = append(dup, fmt.Sprintf("%d jobs past the simulator's tracked keys", stats.UntrackedKeys))
	}
	r.add("at most one remote job per attempt key", len(dup) == 0, "%d attempts, %d remote jobs, at most %d per key%s",
		len(keys), stats.JobsCreated, worst, firstOf(dup))
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
	if len(msgs) == quarantine.MaxLimit {
		unexplained = append(unexplained, fmt.Sprintf("%d rows or more: far more poison than these faults make", len(msgs)))
	}
	detail := fmt.Sprintf("%d rows", len(msgs))
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
	fmt.Fprintf(out, "tasks: %v; %d attempts, %d remote jobs\n", r.ByStatus, r.Attempts, r.Jobs)
	fmt.Fprintf(out, "renders: %v; %d reused\n", r.Renders, r.Reused)
	if r.SimFaults != "" {
		fmt.Fprintf(out, "provider faults: %s\n", r.SimFaults)
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
