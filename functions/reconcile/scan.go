package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/retention"
	"github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

// ScanEventType is the CloudEvent type of the periodic trigger (a Knative
// PingSource, a ticker in `go run ./local`). It carries no envelope: it
// names no tenant or task, it only says "look now".
const ScanEventType = "aivedio.reconcile.scan"

// scanBatch bounds the tasks one scanner handles per scan: a backlog is
// worked off over several scans instead of in one long request.
const scanBatch = 100

// maxRescues bounds how often the scanner re-emits a task's step while the
// task does not move, in any state, before handing it to a person: a step
// that keeps failing (a stage that refuses it, a lookup that never
// answers) must not be re-emitted for ever.
const maxRescues = 3

// rescueReason starts the timeline reason of every re-emission, which is
// how the rounds without progress are counted.
const rescueReason = "reconcile: re-emitted "

// origin marks what the scanner writes.
var scanOrigin = task.Origin{Producer: Name}

// ScanReport counts what one scan did.
type ScanReport struct {
	Rescued            map[task.Status]int // tasks whose lost event was re-emitted, by state
	Settled            int                 // terminal tasks whose settlement was asked again
	DerivativesRetried int                 // optional derivatives a finished task lacks, asked for again
	SlotScopesRebuilt  int                 // concurrency-slot scopes reset from the tasks in flight
	NeedsAttention     int
	Uploads            UploadReport
	Renders            RenderReport
	StaleOutboxRows    int              // unpublished rows older than OUTBOX_STALE_AFTER
	OldestUnpublished  time.Duration    // age of the oldest unpublished row
	ReplaysApplied     int              // executed replays whose after-snapshot was recorded
	FailuresPruned     int64            // delivery failure records of messages long gone
	Retention          retention.Report // outbox and inbox partitions created and dropped
}

// failureRetention is how long a message's failure record outlives its
// last failure: far beyond any broker retry schedule, so what it prunes
// belongs to messages settled by a process that died before forgetting.
const failureRetention = 7 * 24 * time.Hour

// Scan looks for tasks whose progress was lost (an event that died with a
// broker, a delayed wake-up that never came, a stage that crashed after
// its commit but before its next event) and re-emits the event of their
// current step; the stage's own checks make a spurious one a no-op. Each
// rescue is a versioned touch of the task, so it is recorded in
// task_events and happens once per deadline, not once per scan.
func (r *reconciler) Scan(ctx context.Context) (ScanReport, error) {
	rep := ScanReport{Rescued: map[task.Status]int{}}
	j := r.Journey
	type scanner struct {
		status task.Status
		where  string // SQL condition over generation_tasks, $1 = now
		emit   func(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error)
	}
	submit := func(_ context.Context, _ pgx.Tx, t task.Task) ([]outbox.Event, error) {
		e, err := scanOrigin.Emit(t, task.SubmitRequested{TaskID: t.ID, Version: t.Version + 1})
		return []outbox.Event{e}, err
	}
	ms := func(d time.Duration) string { return fmt.Sprint(d.Milliseconds()) }
	scanners := []scanner{
		{task.Queued, `updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ScanGrace), submit},
		// A rescue touches updated_at and leaves the due time: both past
		// the grace is once per deadline, not once per scan.
		{task.WaitingRetry, `next_retry_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ScanGrace) +
			` AND updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ScanGrace), submit},
		{task.Submitting, `updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(r.Timeout+j.ScanGrace), submit},
		{task.ProviderRunning, `next_poll_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ScanGrace) +
			` AND updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ScanGrace), r.lostPoll},
		{task.Fetching, `updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.StuckAfter), r.lostFetch},
		{task.MediaProcessing, `updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.StuckAfter), r.lostMedia},
		{task.Reconciling, `updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ReconcileAfter*time.Duration(j.ReconcileRounds+1)+j.ScanGrace), r.lostLookup},
		{task.CancelReconciling, `updated_at < $1::timestamptz - interval '1 millisecond' * ` + ms(j.ReconcileAfter*time.Duration(j.ReconcileRounds+1)+j.ScanGrace), r.lostCancelLook},
	}
	now := r.now()
	for _, s := range scanners {
		rows, err := r.Pool.Query(ctx, `SELECT task_id FROM generation_tasks WHERE status = '`+string(s.status)+`' AND `+s.where+`
			ORDER BY updated_at LIMIT `+fmt.Sprint(scanBatch), now)
		if err != nil {
			return rep, fmt.Errorf("scan %s: %w", s.status, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return rep, fmt.Errorf("scan %s: %w", s.status, err)
		}
		for _, id := range ids {
			outcome, err := r.rescue(ctx, id, s.status, now, s.emit)
			if err != nil {
				return rep, err
			}
			switch outcome {
			case rescued:
				rep.Rescued[s.status]++
			case gaveUp:
				rep.NeedsAttention++
			}
		}
	}
	var err error
	if rep.Settled, err = r.resettle(ctx, now); err != nil {
		return rep, err
	}
	if rep.DerivativesRetried, err = r.retryMissing(ctx, now); err != nil {
		return rep, err
	}
	if rep.SlotScopesRebuilt, err = r.rebuildSlots(ctx); err != nil {
		return rep, err
	}
	if rep.Uploads, err = r.settleUploads(ctx, now); err != nil {
		return rep, err
	}
	if rep.Renders, err = r.settleRenders(ctx, now); err != nil {
		return rep, err
	}
	if r.Replays != nil {
		// A replay's after-snapshot is for people; failing to take it must
		// not stop the pruning and the outbox check below.
		if rep.ReplaysApplied, err = r.Replays.RecordOutcomes(ctx); err != nil {
			r.Logger.WarnContext(ctx, "could not record the outcome of replays; the next scan tries again", slog.String("error", err.Error()))
		}
	}
	if rep.FailuresPruned, err = quarantine.PruneFailures(ctx, r.Pool, failureRetention); err != nil {
		return rep, err
	}
	var oldest float64
	if err := r.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE created_at < $1::timestamptz - interval '1 millisecond' * `+ms(j.OutboxStale)+`),
			coalesce(extract(epoch FROM $1::timestamptz - min(created_at)), 0)
		FROM outbox_events WHERE published_at IS NULL AND available_at <= $1::timestamptz`, now).Scan(&rep.StaleOutboxRows, &oldest); err != nil {
		return rep, fmt.Errorf("scan outbox: %w", err)
	}
	rep.OldestUnpublished = time.Duration(oldest * float64(time.Second))
	if rep.StaleOutboxRows > 0 {
		r.Logger.WarnContext(ctx, "outbox rows are not being published: is the relay running and the broker reachable?",
			slog.Int("stale_rows", rep.StaleOutboxRows), slog.Duration("oldest", rep.OldestUnpublished))
	}
	if rep.Retention, err = r.maintainRetention(ctx); err != nil {
		return rep, err
	}
	return rep, nil
}

type rescueOutcome int

const (
	skipped rescueOutcome = iota
	rescued
	gaveUp
)

// errGiveUp asks rescue to hand the task to a person instead.
var errGiveUp = errors.New("give up")

// errNoAttempt: the task names a provider job no attempt records, so
// there is nothing to re-drive; one such task must not stop the scan.
var errNoAttempt = fmt.Errorf("%w: no attempt records the provider job", errGiveUp)

// rescue re-checks the task under its row lock (it may have moved since
// the scan read it) and touches it with the events emit returns.
func (r *reconciler) rescue(ctx context.Context, id uuid.UUID, status task.Status, now time.Time, emit func(context.Context, pgx.Tx, task.Task) ([]outbox.Event, error)) (rescueOutcome, error) {
	var out rescueOutcome
	err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
		out = skipped
		cur, err := task.Lock(ctx, tx, id)
		if err != nil || cur.Status != status {
			return err
		}
		// An event of the task still in the outbox is its next step on the
		// way (the relay or the broker is slow or down): re-emitting adds
		// nothing, and must not count as a round without progress.
		var pending bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL AND aggregate_id = $1)`,
			cur.ID.String()).Scan(&pending); err != nil || pending {
			return err
		}
		if onItsWay, err := r.rescueInFlight(ctx, tx, cur.ID, now); err != nil || onItsWay {
			return err
		}
		rounds, err := roundsWithoutProgress(ctx, tx, cur.ID)
		if err != nil {
			return err
		}
		// The rescue belongs to the task's trace: what it re-drives
		// carries on there, linked to the scan.
		ctx, span, err := task.ContinueTrace(ctx, tx, cur.ID, "reconcile "+string(status))
		defer span.End()
		if err != nil {
			return err
		}
		events, err := emit(ctx, tx, cur)
		if rounds >= maxRescues && err == nil {
			err = errGiveUp
		}
		if errors.Is(err, errGiveUp) {
			out = gaveUp
			code, msg := giveUpReason(cur.Status, rounds)
			if errors.Is(err, errNoAttempt) {
				code = "reconcile.attempt_missing"
				msg = fmt.Sprintf("the task is %s with provider job %q, but no attempt records that job: nothing can be polled or looked at; a person decides", cur.Status, cur.ProviderJobID)
			}
			_, err := task.Apply(ctx, tx, scanOrigin, cur, task.Transition{To: task.NeedsAttention, Reason: "reconcile: " + code,
				Set: task.Fields{ErrorCode: &code, ErrorMessage: &msg}})
			return err
		}
		if err != nil || len(events) == 0 {
			return err
		}
		out = rescued
		_, err = task.Touch(ctx, tx, scanOrigin, cur, rescueReason+events[0].Envelope.EventType, events...)
		return err
	})
	if errors.Is(err, task.ErrStale) {
		return skipped, nil
	}
	if err != nil {
		return skipped, fmt.Errorf("rescue task %s: %w", id, err)
	}
	if out == gaveUp {
		r.Logger.WarnContext(ctx, "task needs attention", slog.String("task_id", id.String()))
	}
	return out, nil
}

// rescueInFlight reports whether the scanner's last re-emission for the
// task is published but not yet taken by any consumer group it goes to (no
// inbox or quarantine row): the stage is down or behind, which says nothing
// about the task, so re-emitting adds nothing and must not count as a round
// without progress. Past RECONCILE_STUCK_AFTER it counts as lost with a
// broker, and the task is rescued again.
func (r *reconciler) rescueInFlight(ctx context.Context, tx pgx.Tx, id uuid.UUID, now time.Time) (bool, error) {
	var eventID uuid.UUID
	var topicName, tag string
	// The step, not the task.state.changed the same touch wrote (notify
	// keeps no inbox, so that one would never look taken), and only a step
	// re-emitted since the task last moved: an old poll never taken says
	// nothing about a fetch.
	// The producer is written into the statement so that the partial
	// index on this producer's rows (migration 13) serves it in every plan.
	err := tx.QueryRow(ctx, `SELECT event_id, topic, tag FROM outbox_events
		WHERE aggregate_id = $1 AND producer = '`+Name+`' AND event_type <> $3 AND published_at > $6::timestamptz - interval '1 millisecond' * $2
		  AND created_at >= coalesce((SELECT max(created_at) FROM task_events WHERE task_id = $4 AND reason NOT LIKE $5 || '%'), '-infinity')
		ORDER BY created_at DESC, event_id DESC LIMIT 1`,
		id.String(), r.Journey.StuckAfter.Milliseconds(), catalog.EventTaskStateChanged, id, rescueReason, now).Scan(&eventID, &topicName, &tag)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read last re-emission: %w", err)
	}
	took, err := taken(ctx, tx, eventID, topicName, tag)
	return !took, err
}

// taken reports whether an event reached a consumer group it goes to: the
// group's inbox holds it (handled) or its quarantine does (refused). An
// event on no known topic counts as taken: nobody will ever take it.
func taken(ctx context.Context, tx pgx.Tx, eventID uuid.UUID, topicName, tag string) (bool, error) {
	topic, ok := catalog.TopicByName(topicName)
	if !ok {
		return true, nil
	}
	var groups []string
	for _, g := range catalog.Groups() {
		if g.Takes(topic, tag) {
			groups = append(groups, g.Name)
		}
	}
	var took bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM inbox_dedup WHERE consumer_name = ANY($1) AND event_id = $2)
		OR EXISTS (SELECT 1 FROM message_quarantine WHERE consumer_name = ANY($1) AND event_id = $2)`, groups, eventID).Scan(&took)
	if err != nil {
		return false, fmt.Errorf("read whether event %s was taken: %w", eventID, err)
	}
	return took, nil
}

// roundsWithoutProgress counts the scanner's re-emissions for a task,
// since anything else last moved or touched it, that reached their stage
// and changed nothing: the re-emitted step is in the inbox or the
// quarantine of a group it goes to. A re-emission nobody took (the broker
// down, the stage's consumers deaf, the stage failing on a store that is
// down, so nothing committed) proves nothing about the task and does not
// count, however often it is repeated.
func roundsWithoutProgress(ctx context.Context, tx pgx.Tx, id uuid.UUID) (int, error) {
	return takenRescues(ctx, tx, id, "", true)
}

// takenRescues counts the scanner's rescues of a task (its touches with
// rescueReason) whose re-emitted step a stage took; eventType, when set,
// counts only re-emissions of that type; sinceProgress, only rescues since
// anything else last moved or touched the task. A rescue counts once,
// whichever of its events was taken.
//
// The lookup stage chains its own task.reconcile.due events under the same
// producer name; the scanner's have no causing event. An event belongs to
// the last rescue written before it (its touch is written first, in the
// same transaction).
func takenRescues(ctx context.Context, tx pgx.Tx, id uuid.UUID, eventType string, sinceProgress bool) (int, error) {
	rows, err := tx.Query(ctx, `SELECT created_at FROM task_events WHERE task_id = $1 AND reason LIKE $2 || '%'
		AND (NOT $3 OR version > coalesce((SELECT max(version) FROM task_events WHERE task_id = $1 AND reason NOT LIKE $2 || '%'), 0))
		ORDER BY created_at`, id, rescueReason, sinceProgress)
	if err != nil {
		return 0, fmt.Errorf("read rescues: %w", err)
	}
	touches, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil || len(touches) == 0 {
		return 0, err
	}
	rows, err = tx.Query(ctx, `SELECT event_id, topic, tag, created_at FROM outbox_events
		WHERE aggregate_id = $1 AND producer = '`+Name+`' AND coalesce(causation_id, '') = '' AND event_type <> $2
		  AND ($3 = '' OR event_type = $3) AND published_at IS NOT NULL AND created_at >= $4`,
		id.String(), catalog.EventTaskStateChanged, eventType, touches[0])
	if err != nil {
		return 0, fmt.Errorf("read re-emissions: %w", err)
	}
	type reEmission struct {
		ID         uuid.UUID
		Topic, Tag string
		At         time.Time
	}
	asks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[reEmission])
	if err != nil {
		return 0, fmt.Errorf("read re-emissions: %w", err)
	}
	rounds := map[int]bool{}
	for _, a := range asks {
		round := sort.Search(len(touches), func(i int) bool { return touches[i].After(a.At) }) - 1
		if round < 0 || rounds[round] {
			continue
		}
		took, err := taken(ctx, tx, a.ID, a.Topic, a.Tag)
		if err != nil {
			return 0, err
		}
		if took {
			rounds[round] = true
		}
	}
	return len(rounds), nil
}

// giveUpReason is the error code and message of a task the scanner hands
// to a person.
func giveUpReason(status task.Status, rounds int) (code, message string) {
	switch status {
	case task.Reconciling:
		return "reconcile.submit_unknown", "the submit's outcome stayed unknown through repeated lookups; resubmitting could pay twice, so a person decides"
	case task.CancelReconciling:
		return "reconcile.cancel_unknown", "whether the provider stopped the job after the client's cancel stayed unknown through repeated looks; a person decides whether to charge"
	}
	return "reconcile.no_progress", fmt.Sprintf("the reconciler re-emitted the %s step %d times, each reached its stage, and the task did not move; "+
		"the stage's logs and the quarantine (adapter quarantine list) say why; a person decides", status, rounds)
}

// lostPoll re-emits the live poll chain's message: the same poll_at, so if
// the lost one turns up after all, one of the two is stale.
func (r *reconciler) lostPoll(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	a, err := attempt.OfJob(ctx, tx, t.ID, t.ProviderJobID)
	if errors.Is(err, attempt.ErrNotFound) {
		return nil, errNoAttempt
	}
	if err != nil {
		return nil, err
	}
	e, err := scanOrigin.Emit(t, task.PollDue{TaskID: t.ID, AttemptID: a.ID, PollAt: *t.NextPollAt})
	return []outbox.Event{e}, err
}

func (r *reconciler) lostFetch(_ context.Context, _ pgx.Tx, t task.Task) ([]outbox.Event, error) {
	e, err := scanOrigin.Emit(t, task.FetchRequested{TaskID: t.ID})
	return []outbox.Event{e}, err
}

// lostMedia re-emits only what is missing: the probe when the output was
// never probed, else the derivatives that do not exist yet.
func (r *reconciler) lostMedia(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	var assetID uuid.UUID
	if err := tx.QueryRow(ctx, `SELECT asset_id FROM assets WHERE task_id = $1 AND kind = 'SOURCE'`, t.ID).Scan(&assetID); err != nil {
		return nil, fmt.Errorf("output of task in media processing: %w", err)
	}
	source, err := stage.ReadAsset(ctx, tx, t, assetID)
	if err != nil {
		return nil, err
	}
	steps := []string{catalog.TagProbe}
	if source.Probed {
		rows, err := tx.Query(ctx, `SELECT kind FROM assets WHERE source_asset_id = $1`, assetID)
		if err != nil {
			return nil, err
		}
		have, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, err
		}
		steps = nil
		for _, step := range stage.DerivativeSteps(source.HasAudio) {
			if !slices.Contains(have, catalog.DerivativeKind(step)) {
				steps = append(steps, step)
			}
		}
	}
	var events []outbox.Event
	for _, step := range steps {
		e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: assetID, Step: step})
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	// An open content review whose next call is long overdue lost its
	// REVIEW (with a broker): re-emitted at the attempt its chain is at,
	// so that a late original is a no-op. One waiting on schedule is left
	// alone; REVIEW_MAX_WAIT bounds that wait.
	if source.Probed {
		open, overdue, err := review.Overdue(ctx, tx, t.ID, time.Now().Add(-r.Journey.StuckAfter))
		if err != nil {
			return nil, err
		}
		if overdue {
			e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: open.AssetID, Step: catalog.TagReview,
				Wait: task.Wait{RetryAttempt: open.Attempts}})
			if err != nil {
				return nil, err
			}
			events = append(events, e)
		}
	}
	return events, nil
}

// lostLookup restarts the lookup of a lost submit, a bounded number of
// times.
//
// It gives up only as every rescue does, after maxRescues restarts the
// lookup stage took without the task moving or being touched since: each
// lookup touches the task, so a chain that runs, however slowly (its
// consumer deaf, its function paused), is progress, and ends by itself
// (found, not found, or RECONCILE_MAX_ROUNDS answers that said nothing).
func (r *reconciler) lostLookup(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	lost, err := attempt.Latest(ctx, tx, t.ID, attempt.SubmitUnknown)
	if errors.Is(err, attempt.ErrNotFound) {
		return nil, errGiveUp
	}
	if err != nil {
		return nil, err
	}
	e, err := scanOrigin.Emit(t, task.ReconcileDue{TaskID: t.ID, AttemptID: lost.ID, Wait: task.Wait{Reason: "scanner: lookup chain lost"}})
	return []outbox.Event{e}, err
}

// lostCancelLook restarts the look at a canceled job whose outcome is
// unknown, a bounded number of times.
func (r *reconciler) lostCancelLook(ctx context.Context, tx pgx.Tx, t task.Task) ([]outbox.Event, error) {
	// Every lookup the scanner restarted that the lookup stage took,
	// progress or not: each ran a whole chain of lookups.
	rescues, err := takenRescues(ctx, tx, t.ID, catalog.EventReconcileDue, false)
	if err != nil {
		return nil, err
	}
	if rescues >= maxRescues {
		return nil, errGiveUp
	}
	canceled, err := attempt.OfJob(ctx, tx, t.ID, t.ProviderJobID)
	if errors.Is(err, attempt.ErrNotFound) {
		return nil, errNoAttempt
	}
	if err != nil {
		return nil, err
	}
	e, err := scanOrigin.Emit(t, task.ReconcileDue{TaskID: t.ID, AttemptID: canceled.ID, Wait: task.Wait{Reason: task.ReasonCancel}})
	return []outbox.Event{e}, err
}

// inFlight are the states in which a task holds its concurrency slots:
// from the submit that took them until its provider job ended.
var inFlight = []task.Status{task.Submitting, task.ProviderRunning, task.Reconciling, task.CancelReconciling}

// rebuildSlots resets every concurrency-slot scope that tasks touched
// within SLOT_LEASE to exactly the tasks PostgreSQL has in flight: a Redis
// that lost its data gets them back, and a slot a crashed stage left behind
// is freed before its lease would end. A submit that took its slot but has
// not yet committed SUBMITTING loses the entry for a moment, so one job
// more than the limit may start; the next scan counts it again.
func (r *reconciler) rebuildSlots(ctx context.Context) (int, error) {
	if r.Slots == nil {
		return 0, nil
	}
	rows, err := r.Pool.Query(ctx, `SELECT task_id, tenant_id, model, coalesce(provider, ''), status = ANY($1) FROM generation_tasks
		WHERE updated_at > now() - interval '1 millisecond' * $2 AND provider IS NOT NULL`,
		inFlight, r.Journey.SlotLease.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("scan slot holders: %w", err)
	}
	holders := map[string][]string{} // scope -> holders in flight
	var t task.Task
	var holding bool
	_, err = pgx.ForEachRow(rows, []any{&t.ID, &t.TenantID, &t.Model, &t.Provider, &holding}, func() error {
		for _, scope := range stage.GenerationSlots(t, t.Provider, r.Journey).Scopes {
			if _, ok := holders[scope.Name]; !ok {
				holders[scope.Name] = []string{}
			}
			if holding {
				holders[scope.Name] = append(holders[scope.Name], t.ID.String())
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("scan slot holders: %w", err)
	}
	for scope, hs := range holders {
		if err := r.Slots.Rebuild(ctx, scope, hs, r.Journey.SlotLease); err != nil {
			return 0, err
		}
	}
	return len(holders), nil
}

// maxBackgroundTries bounds the background retries of one optional
// derivative, counted with its first failures: past it the task keeps its
// flag for good (an operator sees it in missing_derivatives).
const maxBackgroundTries = 10

// retryMissing asks again, once per RECONCILE_STUCK_AFTER, for the optional
// derivatives (thumbnail, waveform) a finished task lacks.
func (r *reconciler) retryMissing(ctx context.Context, now time.Time) (int, error) {
	rows, err := r.Pool.Query(ctx, `SELECT t.task_id, a.asset_id, m.kind FROM generation_tasks t
		CROSS JOIN LATERAL unnest(t.missing_derivatives) AS m(kind)
		JOIN assets a ON a.task_id = t.task_id AND a.kind = 'SOURCE'
		LEFT JOIN derivative_failures f ON f.source_asset_id = a.asset_id AND f.kind = m.kind
		WHERE t.status IN ('SUCCEEDED', 'CANCELED_WITH_OUTPUT') AND coalesce(f.failures, 0) < $3
		AND t.updated_at < $1::timestamptz - interval '1 millisecond' * $2
		ORDER BY t.updated_at LIMIT `+fmt.Sprint(scanBatch), now, r.Journey.StuckAfter.Milliseconds(), maxBackgroundTries)
	if err != nil {
		return 0, fmt.Errorf("scan missing derivatives: %w", err)
	}
	type missing struct {
		taskID, assetID uuid.UUID
		kind            string
	}
	todo, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (missing, error) {
		var m missing
		err := row.Scan(&m.taskID, &m.assetID, &m.kind)
		return m, err
	})
	if err != nil {
		return 0, err
	}
	for _, m := range todo {
		err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
			t, err := task.Get(ctx, tx, m.taskID)
			if err != nil {
				return err
			}
			step := catalog.DerivativeStep(m.kind)
			e, err := scanOrigin.Emit(t, task.Postprocess{TaskID: t.ID, AssetID: m.assetID, Step: step})
			if err != nil {
				return err
			}
			ctx, span, err := task.ContinueTrace(ctx, tx, t.ID, "reconcile missing "+m.kind)
			defer span.End()
			if err != nil {
				return err
			}
			if err := outbox.Write(ctx, tx, e); err != nil {
				return err
			}
			// The task stays finished; its clock only paces the retries.
			return task.Pace(ctx, tx, t.ID)
		})
		if err != nil {
			return 0, fmt.Errorf("retry missing %s of task %s: %w", m.kind, m.taskID, err)
		}
	}
	return len(todo), nil
}

// resettle asks billing again for terminal tasks still holding their
// reservation: their settle event was lost.
func (r *reconciler) resettle(ctx context.Context, now time.Time) (int, error) {
	rows, err := r.Pool.Query(ctx, `SELECT t.task_id FROM generation_tasks t JOIN credit_reservations c USING (task_id)
		WHERE c.status = 'HELD' AND t.status IN ('SUCCEEDED', 'FAILED', 'CANCELED', 'CANCELED_WITH_OUTPUT')
		AND t.updated_at < $1::timestamptz - interval '1 millisecond' * $2 ORDER BY t.updated_at LIMIT `+fmt.Sprint(scanBatch), now, r.Journey.ScanGrace.Milliseconds())
	if err != nil {
		return 0, fmt.Errorf("scan unsettled tasks: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		err := pgx.BeginFunc(ctx, r.Pool, func(tx pgx.Tx) error {
			t, err := task.Get(ctx, tx, id)
			if err != nil {
				return err
			}
			e, err := scanOrigin.Emit(t, task.SettleRequested{TaskID: t.ID, Status: t.Status})
			if err != nil {
				return err
			}
			ctx, span, err := task.ContinueTrace(ctx, tx, t.ID, "reconcile settle")
			defer span.End()
			if err != nil {
				return err
			}
			return outbox.Write(ctx, tx, e)
		})
		if err != nil {
			return 0, fmt.Errorf("resettle task %s: %w", id, err)
		}
	}
	return len(ids), nil
}

// Scanner runs the periodic scan outside a CloudEvents delivery (the
// stage's trigger, `go run ./local`'s ticker, tests).
type Scanner struct{ r *reconciler }

// NewScanner returns a scanner over p's database and journey settings.
func NewScanner(p Params) *Scanner {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	return &Scanner{r: &reconciler{Params: p}}
}

// Scan is [reconciler.Scan].
func (s *Scanner) Scan(ctx context.Context) (ScanReport, error) { return s.r.Scan(ctx) }
