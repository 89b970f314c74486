package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// capture is one CAPTURE row of credit_ledger with what it charged for:
// the reservation its business id names, and the task or render that
// reservation paid for, priced as the API priced it.
type capture struct {
	Reservation string
	// Amount is the ledger's signed amount: a capture debits, so the
	// charge is -Amount.
	Amount int64
	// Reserved and Status are the reservation's; Found is false when no
	// reservation has the capture's business id.
	Found    bool
	Reserved int64
	Status   string
	// Payer names the task or render; Price is what the API's price list
	// (billing.DefaultPrice, billing.DefaultRenderPrice: the chaos API
	// takes no other) makes it cost.
	Payer string
	Price int64
}

// readCaptures reads every capture with its reservation and payer.
func readCaptures(ctx context.Context, q pg.Querier) ([]capture, error) {
	rows, err := q.Query(ctx, `SELECT l.business_id, l.amount, r.reservation_id IS NOT NULL, coalesce(r.amount, 0), coalesce(r.status, ''),
			r.task_id, t.model, t.duration_seconds, r.render_job_id, j.profile, j.duration_us
		FROM credit_ledger l
		LEFT JOIN credit_reservations r ON r.reservation_id::text = l.business_id
		LEFT JOIN generation_tasks t ON t.task_id = r.task_id
		LEFT JOIN render_jobs j ON j.render_job_id = r.render_job_id
		WHERE l.ledger_business_type = $1 ORDER BY l.business_id`, billing.EntryCapture)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (capture, error) {
		var c capture
		var taskID, renderID, model, profile *string
		var seconds *int
		var durationUS *int64
		err := row.Scan(&c.Reservation, &c.Amount, &c.Found, &c.Reserved, &c.Status, &taskID, &model, &seconds, &renderID, &profile, &durationUS)
		switch {
		case taskID != nil && model != nil && seconds != nil:
			c.Payer, c.Price = "task "+*taskID, billing.DefaultPrice.Of(*model, *seconds)
		case renderID != nil && profile != nil && durationUS != nil:
			c.Payer, c.Price = "render "+*renderID, billing.DefaultRenderPrice.Of(*profile, *durationUS)
		}
		return c, err
	})
}

// captureProblems holds each capture to the billing rule: the reservation
// was made at the payer's price when it was accepted, and the capture
// charges exactly that reservation, which it left CAPTURED.
func captureProblems(caps []capture) []string {
	var problems []string
	for _, c := range caps {
		switch {
		case !c.Found:
			problems = append(problems, fmt.Sprintf("capture %s of %d names no reservation", c.Reservation, -c.Amount))
		case c.Payer == "":
			problems = append(problems, fmt.Sprintf("capture %s of %d: its reservation pays for no task or render", c.Reservation, -c.Amount))
		case c.Reserved != c.Price:
			problems = append(problems, fmt.Sprintf("%s: reserved %d, its price is %d", c.Payer, c.Reserved, c.Price))
		case -c.Amount != c.Reserved:
			problems = append(problems, fmt.Sprintf("%s: captured %d of a reservation of %d (price %d)", c.Payer, -c.Amount, c.Reserved, c.Price))
		case c.Status != billing.Captured:
			problems = append(problems, fmt.Sprintf("%s: captured %d, its reservation %s", c.Payer, -c.Amount, c.Status))
		}
	}
	return problems
}

func (w *world) checkCaptures(ctx context.Context, r *report) error {
	caps, err := readCaptures(ctx, w.pool)
	if err != nil {
		return err
	}
	addCaptures(r, caps)
	return nil
}

func addCaptures(r *report, caps []capture) {
	problems := captureProblems(caps)
	var charged int64
	for _, c := range caps {
		charged -= c.Amount
	}
	r.add("each capture charges its reservation, reserved at the price", len(problems) == 0,
		"%d captures, %d credits%s", len(caps), charged, firstOf(problems))
}

// reviewed is a task's review as PostgreSQL holds it.
type reviewed struct {
	Task, Status, ErrorCode string
	// Review is task_reviews.status; empty without a row.
	Review string
}

// reviewerProblems holds the decisions PostgreSQL recorded to the
// reviewer's own record of what it answered (decided: per task, what the
// simulator says it decided): an approval, or a success, the simulator
// never gave is the pipeline approving on its own; a rejection, or a task
// failed review.content_rejected, the simulator never gave is a refusal
// made up.
func reviewerProblems(tasks []reviewed, decided map[string][]string) []string {
	var problems []string
	for _, t := range tasks {
		said := decided[t.Task]
		if (t.Review == "APPROVED" || t.Status == "SUCCEEDED") && !slices.Contains(said, reviewsim.Approve) {
			problems = append(problems, fmt.Sprintf("task %s %s, review %s: the reviewer answered %v", t.Task, t.Status, t.Review, said))
		}
		if (t.Review == "REJECTED" || (t.Status == "FAILED" && t.ErrorCode == task.ErrContentRejected)) && !slices.Contains(said, reviewsim.Reject) {
			problems = append(problems, fmt.Sprintf("task %s %s %s, review %s: the reviewer answered %v", t.Task, t.Status, t.ErrorCode, t.Review, said))
		}
	}
	return problems
}

// checkReviewer cross-checks every review decision with the reviewer
// simulator's record.
func (w *world) checkReviewer(ctx context.Context, r *report) error {
	rows, err := w.pool.Query(ctx, `SELECT t.task_id::text, t.status, coalesce(t.error_code, ''), coalesce(v.status, '')
		FROM generation_tasks t LEFT JOIN task_reviews v USING (task_id) ORDER BY t.task_id`)
	if err != nil {
		return err
	}
	tasks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reviewed])
	if err != nil {
		return err
	}
	addReviewer(r, tasks, w.reviewer.Stats().Decisions)
	return nil
}

func addReviewer(r *report, tasks []reviewed, decided map[string][]string) {
	problems := reviewerProblems(tasks, decided)
	var approved, rejected int
	for _, t := range tasks {
		switch t.Review {
		case "APPROVED":
			approved++
		case "REJECTED":
			rejected++
		}
	}
	r.add("every review decision is one the reviewer gave", len(problems) == 0,
		"%d approvals and %d rejections recorded, each held to the reviewer simulator's record of %d tasks%s",
		approved, rejected, len(decided), firstOf(problems))
}
