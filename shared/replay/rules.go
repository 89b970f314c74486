package replay

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/task"
)

// The rules below preview what each consumer group's stage does with an
// event, from the task's current state. Whether a stage acts on a task in
// that state is decided by the same predicates the stage uses (task.FetchActs
// and the like), so that part cannot drift; the reasons, and what the rules
// read from the effects (attempts, assets, the reservation) in place of the
// stage's own look-ups, are mirrored here from the stages in functions/
// (which shared/ may not import): when a stage's look-ups change, change its
// rule here. The verdict is a preview, and the stage's own versioned checks
// and business keys stay the guarantee.

// state is what a rule decides from.
type state struct {
	env     envelope.Envelope
	task    task.Task
	effects Effects
	now     time.Time
}

// rule is how one consumer group treats the one event type it handles.
type rule struct {
	eventType string
	// parse reads the payload as strictly as the stage does and names the
	// task it targets; an error is a refusal.
	parse func(env envelope.Envelope) (target, error)
}

// target is the task an event is about, and the decision once its state
// is known.
type target struct {
	taskID uuid.UUID
	decide func(s state) Verdict
}

// refusal is a verdict that ends the plan early.
type refusal Verdict

func (r refusal) Error() string { return r.Reason }

func refusef(code, format string, args ...any) refusal {
	return refusal{Action: Refuse, Code: code, Reason: fmt.Sprintf(format, args...)}
}

func act(code, format string, args ...any) Verdict {
	return Verdict{Action: Act, Code: code, Reason: fmt.Sprintf(format, args...)}
}

func stale(code, format string, args ...any) Verdict {
	return Verdict{Action: StaleNoop, Code: code, Reason: fmt.Sprintf(format, args...)}
}

// ruleOf builds the rule of a payload type T.
func ruleOf[T any](eventType string, taskOf func(envelope.Envelope, T) (uuid.UUID, error), decide func(state, T) Verdict) rule {
	return rule{eventType: eventType, parse: func(env envelope.Envelope) (target, error) {
		p, err := envelope.DecodePayload[T](env)
		if err != nil {
			return target{}, refusef("payload.invalid", "the payload of %s does not fit its schema (%v): the stage would quarantine it again", env.EventType, err)
		}
		id, err := taskOf(env, p)
		if err != nil {
			return target{}, err
		}
		return target{taskID: id, decide: func(s state) Verdict { return decide(s, p) }}, nil
	}}
}

// rules maps each consumer group to its rule. cg.render.export.v1 has
// none: no render stage exists yet, so nothing can say what a replay would
// do, and it is refused.
var rules = map[string]rule{
	catalog.GroupSubmit.Name: ruleOf(catalog.EventSubmitRequested,
		func(_ envelope.Envelope, p task.SubmitRequested) (uuid.UUID, error) {
			return p.TaskID, nil
		}, decideSubmit),
	catalog.GroupPoll.Name: ruleOf(catalog.EventPollDue,
		func(_ envelope.Envelope, p task.PollDue) (uuid.UUID, error) {
			return p.TaskID, nil
		}, decidePoll),
	catalog.GroupCallback.Name: ruleOf(catalog.EventCallbackReceived,
		func(env envelope.Envelope, _ task.CallbackReceived) (uuid.UUID, error) {
			id, err := uuid.Parse(env.AggregateID)
			if err != nil {
				return uuid.Nil, refusef("payload.invalid", "callback event aggregate_id %q is not a task id: the stage would quarantine it again", env.AggregateID)
			}
			return id, nil
		}, decideCallback),
	catalog.GroupFetch.Name: ruleOf(catalog.EventFetchRequested,
		func(_ envelope.Envelope, p task.FetchRequested) (uuid.UUID, error) {
			return p.TaskID, nil
		}, decideFetch),
	catalog.GroupProbe.Name: ruleOf(catalog.EventPostprocess,
		func(_ envelope.Envelope, p task.Postprocess) (uuid.UUID, error) {
			if p.Step != catalog.TagProbe {
				return uuid.Nil, refusef("payload.invalid", "the probe stage handles step %s, not %q: it would quarantine the event again", catalog.TagProbe, p.Step)
			}
			return p.TaskID, nil
		}, decideMedia("probe")),
	catalog.GroupTranscode.Name: ruleOf(catalog.EventPostprocess,
		func(_ envelope.Envelope, p task.Postprocess) (uuid.UUID, error) {
			if catalog.DerivativeKind(p.Step) == "" {
				return uuid.Nil, refusef("payload.invalid", "the transcode stage makes %s, %s and %s, not %q: it would quarantine the event again",
					catalog.TagTranscodeProxy, catalog.TagThumbnail, catalog.TagWaveform, p.Step)
			}
			return p.TaskID, nil
		}, decideMedia("transcode")),
	catalog.GroupSettle.Name: ruleOf(catalog.EventSettleRequested,
		func(_ envelope.Envelope, p task.SettleRequested) (uuid.UUID, error) {
			return p.TaskID, nil
		}, decideSettle),
	catalog.GroupNotify.Name: ruleOf(catalog.EventTaskStateChanged,
		func(env envelope.Envelope, p task.StateChanged) (uuid.UUID, error) {
			if env.TenantID != p.TenantID.String() {
				return uuid.Nil, refusef("security.tenant_mismatch", "the state change names tenant %s but the event tenant %s: never replayed", p.TenantID, env.TenantID)
			}
			if p.TaskID.String() != env.AggregateID {
				return uuid.Nil, refusef("payload.invalid", "state change of task %s arrived as an event about %s: the stage would quarantine it again", p.TaskID, env.AggregateID)
			}
			return p.TaskID, nil
		}, decideNotify),
	catalog.GroupReconcile.Name: ruleOf(catalog.EventReconcileDue,
		func(_ envelope.Envelope, p task.ReconcileDue) (uuid.UUID, error) {
			return p.TaskID, nil
		}, decideReconcile),
}

// at names a task's state and version in a reason.
func at(t task.Task) string { return fmt.Sprintf("%s (v%d)", t.Status, t.Version) }

// openAttempt is the attempt the submit stage resumes: the latest one
// still SUBMITTING.
func openAttempt(e Effects) *Attempt {
	for i := len(e.Attempts) - 1; i >= 0; i-- {
		if e.Attempts[i].Status == "SUBMITTING" {
			return &e.Attempts[i]
		}
	}
	return nil
}

// remoteJobs lists the remote jobs already made, for a reason.
func remoteJobs(e Effects) string {
	var jobs []string
	for _, a := range e.Attempts {
		if a.ProviderJobID != "" {
			jobs = append(jobs, fmt.Sprintf("#%d %s", a.AttemptNo, a.ProviderJobID))
		}
	}
	if len(jobs) == 0 {
		return "none"
	}
	return strings.Join(jobs, ", ")
}

func decideSubmit(s state, p task.SubmitRequested) Verdict {
	t := s.task
	switch {
	case !task.SubmitResumes(t) && !p.Holds(t):
		return stale("submit.stale", "the delayed resubmit expects the task %s at version %d, and it is %s: the submit stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at(t))
	case task.SubmitStarts(t, s.now):
		if a := openAttempt(s.effects); a != nil {
			return act("submit.retry_attempt", "the task is %s: the submit stage would call %s again with attempt #%d and its provider idempotency key %s, so the provider returns the job that key already made, if any",
				at(t), a.Provider, a.AttemptNo, a.IdempotencyKey)
		}
		return act("submit.new_attempt", "the task is %s with no open attempt: the submit stage would create attempt #%d and submit it (remote jobs so far: %s)",
			at(t), len(s.effects.Attempts)+1, remoteJobs(s.effects))
	case task.SubmitResumes(t):
		if a := openAttempt(s.effects); a != nil {
			return act("submit.resume_attempt", "the task is %s with attempt #%d open: the submit stage would resume it with the same provider idempotency key %s, reaching the same remote job",
				at(t), a.AttemptNo, a.IdempotencyKey)
		}
		return stale("submit.stale", "the task is %s but has no open attempt: the submit stage would record a stale no-op", at(t))
	case t.Status == task.WaitingRetry && t.NextRetryAt != nil:
		return stale("submit.not_due", "the task is %s until %s: the delayed resubmit that set that time is still on its way, so the submit stage would record a stale no-op",
			at(t), t.NextRetryAt.UTC().Format(time.RFC3339))
	}
	return stale("submit.stale", "the task is %s, past submission: the submit stage acts only on QUEUED, WAITING_RETRY or SUBMITTING and would record a stale no-op; no new attempt, no second generation (remote jobs: %s)",
		at(t), remoteJobs(s.effects))
}

func decidePoll(s state, p task.PollDue) Verdict {
	t := s.task
	switch {
	case task.PollActs(t, p.PollAt) && t.CancelRequested:
		return act("poll.cancel", "the task is %s and its client asked to cancel: the poll stage would ask %s to stop job %s and apply the cancel rule (stopped: CANCELED and released; finished first: CANCELED_WITH_OUTPUT and charged; unknown: CANCEL_RECONCILING)",
			at(t), t.Provider, t.ProviderJobID)
	case task.PollActs(t, p.PollAt):
		return act("poll.due", "the task is %s and this is its next poll: the poll stage would ask %s for job %s and apply its state",
			at(t), t.Provider, t.ProviderJobID)
	case t.Status != task.ProviderRunning:
		return stale("poll.stale", "the task is %s, not PROVIDER_RUNNING: the poll stage would record a stale no-op", at(t))
	}
	next := "none"
	if t.NextPollAt != nil {
		next = t.NextPollAt.UTC().Format(time.RFC3339Nano)
	}
	return stale("poll.stale", "the poll chain has moved on (next poll %s, this event is for %s): the poll stage would record a stale no-op",
		next, p.PollAt.UTC().Format(time.RFC3339Nano))
}

func decideCallback(s state, p task.CallbackReceived) Verdict {
	t := s.task
	if !task.CallbackActs(t, p.Provider, p.ProviderJobID) {
		return stale("callback.stale", "the task is %s with job %s/%s, the callback is for %s/%s: the poll stage would record a stale no-op",
			at(t), t.Provider, t.ProviderJobID, p.Provider, p.ProviderJobID)
	}
	if t.CancelRequested {
		return act("callback.cancel", "the task is %s on job %s and its client asked to cancel: the poll stage would ask %s to stop the job and apply the cancel rule",
			at(t), t.ProviderJobID, t.Provider)
	}
	return act("callback.apply", "the task is %s on job %s: the poll stage would ask %s for the job's state and apply it if it finished",
		at(t), t.ProviderJobID, t.Provider)
}

func decideFetch(s state, p task.FetchRequested) Verdict {
	t := s.task
	if !task.FetchActs(t) {
		return stale("fetch.stale", "the task is %s, not FETCHING: the fetch stage would record a stale no-op", at(t))
	}
	if !p.Holds(t) {
		return stale("fetch.stale", "the delayed fetch expects the task %s at version %d, and it is %s: the fetch stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at(t))
	}
	for _, a := range s.effects.Assets {
		if a.Kind == "SOURCE" {
			return act("fetch.record", "the task is %s and its output is stored already as asset %s: the fetch stage would find it and move on without storing it twice",
				at(t), a.AssetID)
		}
	}
	return act("fetch.store", "the task is %s: the fetch stage would download job %s's output once and store it", at(t), t.ProviderJobID)
}

// decideMedia is the rule of the probe and transcode stages, the latter's
// background retry of a derivative a finished task went without included.
func decideMedia(stage string) func(state, task.Postprocess) Verdict {
	return func(s state, p task.Postprocess) Verdict {
		t := s.task
		background := stage == "transcode" && task.DerivativeRetryActs(t, catalog.DerivativeKind(p.Step))
		if !task.PostprocessActs(t) && !background {
			return stale(stage+".stale", "the task is %s, not MEDIA_PROCESSING: the %s stage would record a stale no-op", at(t), stage)
		}
		i := slices.IndexFunc(s.effects.Assets, func(a Asset) bool { return a.AssetID == p.AssetID })
		if i < 0 {
			return Verdict(refusef("asset.wrong_task", "asset %s is not an output of task %s: the %s stage would quarantine the event again", p.AssetID, t.ID, stage))
		}
		if background {
			return act("transcode.background", "the task is %s without its %s: the transcode stage would make it from asset %s in the background, leaving the task's state as it is",
				at(t), strings.ToLower(catalog.DerivativeKind(p.Step)), p.AssetID)
		}
		if kind := catalog.DerivativeKind(p.Step); kind != "" {
			for _, a := range s.effects.Assets {
				if a.SourceAssetID != nil && *a.SourceAssetID == p.AssetID && a.Kind == kind {
					return act(stage+".record", "the task is %s and the %s of asset %s exists already (asset %s): the stage would record the step without making it again",
						at(t), kind, p.AssetID, a.AssetID)
				}
			}
		}
		return act(stage+".run", "the task is %s: the %s stage would run step %s on asset %s", at(t), stage, p.Step, p.AssetID)
	}
}

func decideSettle(s state, _ task.SettleRequested) Verdict {
	t := s.task
	if !task.SettleActs(t) {
		return stale("settle.not_over", "the task is %s: the settle that counts comes with its final transition, so the settle stage would record a stale no-op", at(t))
	}
	r := s.effects.Reservation
	if r == nil {
		return Verdict(refusef("billing.no_reservation", "task %s holds no credit reservation: the settle stage would quarantine the event again", t.ID))
	}
	if r.Status != "HELD" {
		settled := ""
		if r.SettledAt != nil {
			settled = " at " + r.SettledAt.Format(time.RFC3339)
		}
		return stale("settle.already_settled", "reservation %s was %s%s (ledger rows: %d): the settle stage would record a stale no-op, and UNIQUE(ledger_business_type, business_id) refuses a second entry anyway",
			r.ReservationID, r.Status, settled, len(s.effects.Ledger))
	}
	if t.Status.Charged() {
		return act("settle.capture", "the task is %s and reservation %s still HELD: the settle stage would capture its %d credits once (ledger key CAPTURE/%s)",
			at(t), r.ReservationID, r.Amount, r.ReservationID)
	}
	return act("settle.release", "the task is %s and reservation %s still HELD: the settle stage would release its %d credits; nothing is charged",
		at(t), r.ReservationID, r.Amount)
}

func decideNotify(s state, p task.StateChanged) Verdict {
	return act("notify.push", "the notify stage would push the change to %s v%d to the tenant's live subscribers; it changes no state, and a subscriber that has seen v%d (the task is %s) drops it",
		p.To, p.Version, s.task.Version, at(s.task))
}

// decideReconcile previews the reconcile stage's two looks: at a lost
// submit, and at the job of a cancel whose outcome is unknown.
func decideReconcile(s state, p task.ReconcileDue) Verdict {
	t := s.task
	if task.ReconcileCancelActs(t, p) {
		return act("reconcile.cancel_look", "the task is %s: the reconcile stage would look at provider job %s again, asking it to stop if it still runs, and apply the cancel rule (stopped: CANCELED and released; finished first: CANCELED_WITH_OUTPUT and charged; still unknown: look again later)",
			at(t), t.ProviderJobID)
	}
	if !task.ReconcileSubmitActs(t) {
		return stale("reconcile.stale", "the task is %s, not RECONCILING: the reconcile stage would record a stale no-op", at(t))
	}
	i := slices.IndexFunc(s.effects.Attempts, func(a Attempt) bool { return a.AttemptID == p.AttemptID && a.Status == "SUBMIT_UNKNOWN" })
	if i < 0 {
		return stale("reconcile.stale", "attempt %s is no longer SUBMIT_UNKNOWN: the reconcile stage would record a stale no-op", p.AttemptID)
	}
	return act("reconcile.lookup", "the task is %s: the reconcile stage would look attempt #%d up at %s by its client request id; a found job is adopted, not submitted again",
		at(t), s.effects.Attempts[i].AttemptNo, s.effects.Attempts[i].Provider)
}
