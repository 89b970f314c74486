package reconcile_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/task"
)

// margin is how far on either side of a scanner's threshold the tests put
// a task: far more than a scan takes, far less than any threshold.
const margin = 5 * time.Second

// backdate sets the task's updated_at and next_retry_at to ago before the
// database's now. Tests call it right before the scan, so the task does
// not age across the threshold while the others are set up.
func (b *scanBundle) backdate(t *testing.T, id uuid.UUID, ago time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET updated_at = now() - $2 * interval '1 millisecond',
		next_retry_at = now() - $2 * interval '1 millisecond' WHERE task_id = $1`, id, ago.Milliseconds())
	require.NoError(t, err)
}

// retryAt sets only the task's next_retry_at, to in after the database's
// now (negative: before).
func (b *scanBundle) retryAt(t *testing.T, id uuid.UUID, in time.Duration) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now() + $2 * interval '1 millisecond' WHERE task_id = $1`,
		id, in.Milliseconds())
	require.NoError(t, err)
}

// steps are the task's outbox events other than its state-changed ones:
// the steps written for it.
func (b *scanBundle) steps(t *testing.T, id uuid.UUID) []outbox.Stored {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT `+outbox.Columns+` FROM outbox_events WHERE aggregate_id = $1 AND event_type <> $2
		ORDER BY created_at, event_id`, id.String(), catalog.EventTaskStateChanged)
	require.NoError(t, err)
	evs, err := outbox.Scan(rows)
	require.NoError(t, err)
	return evs
}

// pendingStep writes the task's next step as a stage would, and leaves it
// unpublished: the relay or the broker is slow or down.
func (b *scanBundle) pendingStep(t *testing.T, tk task.Task, step task.Message) {
	t.Helper()
	e, err := task.Origin{Producer: "stage"}.Emit(tk, step)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error { return outbox.Write(t.Context(), tx, e) }))
}

// publishAll marks every outbox row published, as the relay would.
func (b *scanBundle) publishAll(t *testing.T) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() WHERE published_at IS NULL`)
	require.NoError(t, err)
}

// withJob gives the task a provider job (named after the task: job ids
// are unique per provider) and the ACCEPTED attempt that created it, as a
// task past its submit has. It returns the attempt's id.
func (b *scanBundle) withJob(t *testing.T, id uuid.UUID) uuid.UUID {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', provider_job_id = 'job-' || $1::uuid::text WHERE task_id = $1`, id)
	require.NoError(t, err)
	attemptID := uuid.New()
	_, err = b.pool.Exec(t.Context(), `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status)
		VALUES ($1, $2::uuid, 1, 'sim', 'm', $2::uuid::text || '-1', 'crid', 'job-' || $2::uuid::text, 'ACCEPTED')`, attemptID, id)
	require.NoError(t, err)
	return attemptID
}

// requireLeftAlone: the scan did not touch the task and wrote nothing for
// it beyond the steps it already had.
func (b *scanBundle) requireLeftAlone(t *testing.T, before task.Task, steps int, msg string) {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, before.ID)
	require.NoError(t, err)
	require.Equal(t, before.Status, got.Status, msg)
	require.Equal(t, before.Version, got.Version, msg)
	require.Len(t, b.steps(t, before.ID), steps, msg)
}

// requireRescued: the scan touched the task once, in its state, with the
// rescue on its timeline, and wrote exactly one step, of eventType, sent by
// the reconciler. It returns that step.
func (b *scanBundle) requireRescued(t *testing.T, before task.Task, eventType string) outbox.Stored {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, before.ID)
	require.NoError(t, err)
	require.Equal(t, before.Status, got.Status, "a rescue changes no state")
	require.Equal(t, before.Version+1, got.Version, "a rescue is a versioned touch")
	var from, to task.Status
	var reason string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT from_status, to_status, reason FROM task_events WHERE task_id = $1 AND version = $2`,
		before.ID, got.Version).Scan(&from, &to, &reason))
	require.Equal(t, before.Status, from)
	require.Equal(t, before.Status, to)
	// The prefix is what counts the rounds without progress.
	require.Equal(t, "reconcile: re-emitted "+eventType, reason)
	steps := b.steps(t, before.ID)
	require.Len(t, steps, 1)
	require.Equal(t, eventType, steps[0].Envelope.EventType)
	require.Equal(t, reconcile.Name, steps[0].Envelope.Producer)
	return steps[0]
}

func decode[P any](t *testing.T, ev outbox.Stored) P {
	t.Helper()
	var p P
	require.NoError(t, json.Unmarshal(ev.Envelope.Payload, &p))
	return p
}

// requireQuiet: a scan rescued nothing and handed nothing to a person.
func requireQuiet(t *testing.T, rep reconcile.ScanReport, err error, msg string) {
	t.Helper()
	require.NoError(t, err)
	for status, n := range rep.Rescued {
		require.Zero(t, n, "%s: %s rescued", msg, status)
	}
	require.Zero(t, rep.NeedsAttention, msg)
}

// TestScanResubmitsAStuckSubmitAfterTheSubmitTimeout: a SUBMITTING task
// may be waiting on a provider call of up to Timeout, so only one unchanged
// for longer than Timeout plus the grace lost its submit.
func TestScanResubmitsAStuckSubmitAfterTheSubmitTimeout(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	threshold := 10*time.Second + scanJourney.ScanGrace // scanSetup's Timeout
	past := b.stuckTask(t, task.Submitting, 0)
	inside := b.stuckTask(t, task.Submitting, 0)
	pending := b.stuckTask(t, task.Submitting, 0)
	b.pendingStep(t, pending, task.SubmitRequested{TaskID: pending.ID, Version: pending.Version})
	b.backdate(t, past.ID, threshold+margin)
	b.backdate(t, pending.ID, time.Hour)
	// Past the grace alone, inside the submit's timeout plus the grace.
	b.backdate(t, inside.ID, threshold-margin)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Submitting])
	require.Zero(t, rep.NeedsAttention)
	ev := b.requireRescued(t, past, catalog.EventSubmitRequested)
	require.Equal(t, task.SubmitRequested{TaskID: past.ID, Version: past.Version + 1}, decode[task.SubmitRequested](t, ev),
		"the resubmit names the version the touch made")
	topic, _ := task.SubmitRequested{}.Route(false)
	require.Equal(t, topic, ev.Topic, "sent now, not delayed")
	b.requireLeftAlone(t, inside, 0, "inside the threshold")
	b.requireLeftAlone(t, pending, 1, "its submit is still in the outbox")

	rep, err = b.scanner.Scan(t.Context())
	requireQuiet(t, rep, err, "an immediate second scan")
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.Submitting, Version: past.Version + 1}, 1, "not re-emitted")

	// Published, the rescued task is still left alone (the touch restarted
	// its clock), and the one held back by its pending submit is rescued.
	b.publishAll(t)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Submitting])
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.Submitting, Version: past.Version + 1}, 1, "its clock restarted")
	b.requireLeftAlone(t, inside, 0, "still inside the threshold")
	require.Equal(t, pending.Version+1, b.reloadTask(t, pending.ID).Version, "rescued once its submit was published")
}

// TestScanResubmitsAWaitingRetryTaskPastItsRetryTime: a WAITING_RETRY task
// is due at next_retry_at, whatever its updated_at says; its delayed
// resubmit is lost once next_retry_at is more than the grace ago.
func TestScanResubmitsAWaitingRetryTaskPastItsRetryTime(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	past := b.stuckTask(t, task.WaitingRetry, 0)
	inside := b.stuckTask(t, task.WaitingRetry, 0)
	future := b.stuckTask(t, task.WaitingRetry, 0)
	pending := b.stuckTask(t, task.WaitingRetry, 0)
	touched := b.stuckTask(t, task.WaitingRetry, 0)
	at := time.Now().Add(time.Minute)
	delayed, err := task.Origin{Producer: "submit"}.EmitAt(pending, task.SubmitRequested{TaskID: pending.ID, Version: pending.Version,
		Wait: task.Wait{ExpectedStatus: task.WaitingRetry, ExpectedVersion: pending.Version, NotBefore: at, Reason: "provider 429", RetryAttempt: 1}}, at)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error { return outbox.Write(t.Context(), tx, delayed) }))

	b.backdate(t, pending.ID, time.Hour)
	b.backdate(t, past.ID, time.Hour)
	b.retryAt(t, past.ID, -(scanJourney.ScanGrace + margin))
	// Due long ago but touched just now (a rescue, a stage's wait): its
	// resubmit was just sent, so this is once per deadline.
	b.retryAt(t, touched.ID, -time.Hour)
	// Unchanged for an hour, but not due yet: its resubmit is on its way.
	b.backdate(t, future.ID, time.Hour)
	b.retryAt(t, future.ID, 10*time.Minute)
	b.backdate(t, inside.ID, time.Hour)
	b.retryAt(t, inside.ID, -(scanJourney.ScanGrace - margin))

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.WaitingRetry])
	require.Zero(t, rep.NeedsAttention)
	ev := b.requireRescued(t, past, catalog.EventSubmitRequested)
	require.Equal(t, task.SubmitRequested{TaskID: past.ID, Version: past.Version + 1}, decode[task.SubmitRequested](t, ev),
		"the resubmit names the version the touch made, and no wait: it is due now")
	topic, _ := task.SubmitRequested{}.Route(false)
	require.Equal(t, topic, ev.Topic, "sent now, not delayed")
	b.requireLeftAlone(t, inside, 0, "due inside the grace")
	b.requireLeftAlone(t, future, 0, "not due yet, however old its updated_at")
	b.requireLeftAlone(t, pending, 1, "its delayed resubmit is still in the outbox")
	b.requireLeftAlone(t, touched, 0, "touched within the grace")

	rep, err = b.scanner.Scan(t.Context())
	requireQuiet(t, rep, err, "an immediate second scan")
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.WaitingRetry, Version: past.Version + 1}, 1, "not re-emitted")

	// Published, the resubmit is on its way: the rescue's touch, not the
	// outbox, keeps the next scans from sending it again.
	b.publishAll(t)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.WaitingRetry], "only the task held back by its unpublished resubmit")
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.WaitingRetry, Version: past.Version + 1}, 1, "once per deadline, not once per scan")
}

// TestScanHandsATaskWithoutItsAttemptToAPerson: a running or cancel-looking
// task whose provider job no attempt records cannot be re-driven; it is
// handed to a person with that reason, and the rest of the scan (here a
// lost settle) still runs.
func TestScanHandsATaskWithoutItsAttemptToAPerson(t *testing.T) {
	t.Parallel()
	for _, status := range []task.Status{task.ProviderRunning, task.CancelReconciling} {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			b := scanSetup(t)
			orphan := b.stuckTask(t, status, time.Hour)
			_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET provider = 'sim', provider_job_id = 'job-nobody-recorded' WHERE task_id = $1`, orphan.ID)
			require.NoError(t, err)
			b.stuckTask(t, task.Succeeded, time.Hour)

			rep, err := b.scanner.Scan(t.Context())
			require.NoError(t, err, "one task without its attempt does not stop the scan")
			require.Equal(t, 1, rep.NeedsAttention)
			require.Equal(t, 1, rep.Settled, "the rest of the scan ran")
			got := b.reloadTask(t, orphan.ID)
			require.Equal(t, task.NeedsAttention, got.Status)
			require.Equal(t, "reconcile.attempt_missing", got.ErrorCode)
			require.Contains(t, got.ErrorMessage, "job-nobody-recorded")
		})
	}
}

// TestScanRefetchesAFetchStuckPastStuckAfter: a fetch may legitimately take
// long (a large download, output not ready yet), so only a FETCHING task
// unchanged for longer than StuckAfter lost its fetch.
func TestScanRefetchesAFetchStuckPastStuckAfter(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	past := b.stuckTask(t, task.Fetching, 0)
	inside := b.stuckTask(t, task.Fetching, 0)
	pending := b.stuckTask(t, task.Fetching, 0)
	b.pendingStep(t, pending, task.FetchRequested{TaskID: pending.ID, AttemptID: uuid.New()})
	b.backdate(t, past.ID, scanJourney.StuckAfter+margin)
	b.backdate(t, pending.ID, time.Hour)
	b.backdate(t, inside.ID, scanJourney.StuckAfter-margin)

	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Fetching])
	require.Zero(t, rep.NeedsAttention)
	ev := b.requireRescued(t, past, catalog.EventFetchRequested)
	// A fresh fetch, no wait: the fetch stage reads the job from the task.
	require.Equal(t, task.FetchRequested{TaskID: past.ID}, decode[task.FetchRequested](t, ev))
	topic, _ := task.FetchRequested{}.Route(false)
	require.Equal(t, topic, ev.Topic, "sent now, not delayed")
	b.requireLeftAlone(t, inside, 0, "inside StuckAfter")
	b.requireLeftAlone(t, pending, 1, "its fetch is still in the outbox")

	rep, err = b.scanner.Scan(t.Context())
	requireQuiet(t, rep, err, "an immediate second scan")
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.Fetching, Version: past.Version + 1}, 1, "not re-emitted")

	b.publishAll(t)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Fetching])
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.Fetching, Version: past.Version + 1}, 1, "its clock restarted")
	b.requireLeftAlone(t, inside, 0, "still inside StuckAfter")
	require.Equal(t, pending.Version+1, b.reloadTask(t, pending.ID).Version, "rescued once its fetch was published")
}

// cancelLookAfter is when a CANCEL_RECONCILING task's look chain is lost:
// the reconcile stage looks ReconcileRounds times, ReconcileAfter apart,
// and may answer late by the grace.
var cancelLookAfter = scanJourney.ReconcileAfter*time.Duration(scanJourney.ReconcileRounds+1) + scanJourney.ScanGrace

// TestScanRelooksAtALostCancelAfterTheLookChain: a CANCEL_RECONCILING task
// unchanged for longer than the whole look chain lost its look; the
// rescue looks again at the canceled attempt's job, as a cancel look.
func TestScanRelooksAtALostCancelAfterTheLookChain(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	past := b.stuckTask(t, task.CancelReconciling, 0)
	inside := b.stuckTask(t, task.CancelReconciling, 0)
	pending := b.stuckTask(t, task.CancelReconciling, 0)
	canceled := b.withJob(t, past.ID)
	b.withJob(t, inside.ID)
	pendingAttempt := b.withJob(t, pending.ID)
	past, inside, pending = b.reloadTask(t, past.ID), b.reloadTask(t, inside.ID), b.reloadTask(t, pending.ID)
	at := time.Now().Add(scanJourney.ReconcileAfter)
	look, err := task.Origin{Producer: reconcile.Name}.EmitAt(pending, task.ReconcileDue{TaskID: pending.ID, AttemptID: pendingAttempt, Round: 1,
		Wait: task.Wait{Reason: task.ReasonCancel}}, at)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error { return outbox.Write(t.Context(), tx, look) }))
	b.backdate(t, past.ID, cancelLookAfter+margin)
	b.backdate(t, pending.ID, time.Hour)
	// Past the chain's looks and the grace, inside the chain's last wait.
	b.backdate(t, inside.ID, cancelLookAfter-margin)

	before := time.Now()
	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.CancelReconciling])
	require.Zero(t, rep.NeedsAttention)
	ev := b.requireRescued(t, past, catalog.EventReconcileDue)
	require.Equal(t, task.ReconcileDue{TaskID: past.ID, AttemptID: canceled, Wait: task.Wait{Reason: task.ReasonCancel}},
		decode[task.ReconcileDue](t, ev), "a cancel look at the attempt whose job was canceled, from round 0")
	require.False(t, ev.DeliverAt.Before(before.Add(-time.Second)) || ev.DeliverAt.After(time.Now()), "due at once, not %s", ev.DeliverAt)
	b.requireLeftAlone(t, inside, 0, "inside the look chain")
	b.requireLeftAlone(t, pending, 1, "its next look is still in the outbox")

	rep, err = b.scanner.Scan(t.Context())
	requireQuiet(t, rep, err, "an immediate second scan")
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.CancelReconciling, Version: past.Version + 1}, 1, "not re-emitted")

	// Published, the delayed look is on its way until its group takes it
	// or RECONCILE_STUCK_AFTER says the broker lost it.
	b.publishAll(t)
	rep, err = b.scanner.Scan(t.Context())
	requireQuiet(t, rep, err, "published, not yet taken")
	b.requireLeftAlone(t, task.Task{ID: past.ID, Status: task.CancelReconciling, Version: past.Version + 1}, 1, "its clock restarted")
	b.requireLeftAlone(t, inside, 0, "still inside the look chain")
	b.requireLeftAlone(t, pending, 1, "its look is on its way")
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() - interval '1 hour'`)
	require.NoError(t, err)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.CancelReconciling])
	require.Equal(t, pending.Version+1, b.reloadTask(t, pending.ID).Version, "rescued once its look was lost")
}

// TestScanWaitsForAReemittedStepItsStageHasNotTaken: a stage that is down
// (or behind) has not taken the step the scanner re-emitted; that is no
// round without progress, and re-emitting again adds nothing. Once the
// stage takes it (its inbox row) and the task still does not move, the
// next scan counts the round; a step never taken counts as lost after
// RECONCILE_STUCK_AFTER.
func TestScanWaitsForAReemittedStepItsStageHasNotTaken(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.Queued, time.Hour)
	rep, err := b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued])
	b.publishAll(t)
	for range 5 { // the submit stage is down: nobody takes the re-emitted submit
		b.backdate(t, stuck.ID, time.Hour)
		rep, err = b.scanner.Scan(t.Context())
		requireQuiet(t, rep, err, "the stage has not taken the last one")
	}
	require.Equal(t, stuck.Version+1, b.reloadTask(t, stuck.ID).Version)

	// The stage took it and refused to move the task: a round is counted.
	// The task.state.changed the same touch wrote sorts last here, as it
	// may when both get one timestamp: the step is what is looked at.
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = created_at + interval '1 millisecond' WHERE event_type = $1`,
		catalog.EventTaskStateChanged)
	require.NoError(t, err)
	steps := b.steps(t, stuck.ID)
	require.Len(t, steps, 1)
	_, err = b.pool.Exec(t.Context(), `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash)
		VALUES ($1, $2, 'STALE_NOOP', $3)`, catalog.GroupSubmit.Name, steps[0].Envelope.EventID, make([]byte, 32))
	require.NoError(t, err)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued], "taken and the task did not move: re-emitted, a second round")

	// Never taken, and older than RECONCILE_STUCK_AFTER: lost with a broker.
	b.publishAll(t)
	_, err = b.pool.Exec(t.Context(), `UPDATE outbox_events SET published_at = now() - $1 * interval '1 second'`, (scanJourney.StuckAfter + time.Minute).Seconds())
	require.NoError(t, err)
	b.backdate(t, stuck.ID, time.Hour)
	rep, err = b.scanner.Scan(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Rescued[task.Queued], "a third round")
	require.Equal(t, stuck.Version+3, b.reloadTask(t, stuck.ID).Version)
}

// TestScanHandsARepeatedlyLostCancelLookToAPerson: a cancel whose outcome
// stays unknown is looked at again a bounded number of times; then a person
// decides whether to charge.
func TestScanHandsARepeatedlyLostCancelLookToAPerson(t *testing.T) {
	t.Parallel()
	b := scanSetup(t)
	stuck := b.stuckTask(t, task.CancelReconciling, time.Hour)
	canceled := b.withJob(t, stuck.ID)
	for i := range 4 {
		b.age(t, stuck.ID)
		rep, err := b.scanner.Scan(t.Context())
		require.NoError(t, err)
		if i < 3 {
			require.Equal(t, 1, rep.Rescued[task.CancelReconciling], "scan %d looks again", i)
			require.Zero(t, rep.NeedsAttention, "scan %d", i)
		} else {
			require.Zero(t, rep.Rescued[task.CancelReconciling], "scan %d", i)
			require.Equal(t, 1, rep.NeedsAttention, "scan %d gives up", i)
		}
	}
	got := b.reloadTask(t, stuck.ID)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "reconcile.cancel_unknown", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "a person decides whether to charge")
	require.Equal(t, stuck.Version+4, got.Version, "three touches, then the hand-over")
	looks := b.steps(t, stuck.ID)
	require.Len(t, looks, 3, "one look per rescue, none with the hand-over")
	for _, ev := range looks {
		require.Equal(t, task.ReconcileDue{TaskID: stuck.ID, AttemptID: canceled, Wait: task.Wait{Reason: task.ReasonCancel}}, decode[task.ReconcileDue](t, ev))
	}
	var touches int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM task_events WHERE task_id = $1
		AND from_status = 'CANCEL_RECONCILING' AND to_status = 'CANCEL_RECONCILING'`, stuck.ID).Scan(&touches))
	require.Equal(t, 3, touches)

	// Handed over, the task is the person's: later scans leave it alone.
	b.age(t, stuck.ID)
	rep, err := b.scanner.Scan(t.Context())
	requireQuiet(t, rep, err, "after the hand-over")
	require.Equal(t, got.Version, b.reloadTask(t, stuck.ID).Version)
}

func (b *scanBundle) reloadTask(t *testing.T, id uuid.UUID) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, id)
	require.NoError(t, err)
	return got
}
