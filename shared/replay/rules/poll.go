package rules

import (
	"time"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

// Poll is the poll stage's rule for replay of a poll (the poll group):
// what a replayed poll would do to the task as it is now.
func Poll() preview.Rule {
	return preview.RuleOf(catalog.EventPollDue, preview.PayloadTask, decidePoll)
}

// Callback is the poll stage's rule for replay of a provider callback (the
// callback group), which names its task by the event's aggregate.
func Callback() preview.Rule {
	return preview.RuleOf(catalog.EventCallbackReceived,
		func(env envelope.Envelope, _ task.CallbackReceived) (uuid.UUID, error) {
			id, err := uuid.Parse(env.AggregateID)
			if err != nil {
				return uuid.Nil, preview.Refusal("payload.invalid", "callback event aggregate_id %q is not a task id: the stage would quarantine it again", env.AggregateID)
			}
			return id, nil
		}, decideCallback)
}

func decidePoll(s preview.State, p task.PollDue) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	switch {
	case !p.Holds(t):
		return preview.StaleNoop.Because("poll.stale", "the delayed poll expects the task %s at version %d, and it is %s: the poll stage would record a stale no-op",
			p.ExpectedStatus, p.ExpectedVersion, at)
	case task.PollActs(t, p.PollAt) && t.CancelRequested:
		return preview.Act.Because("poll.cancel", "the task is %s and its client asked to cancel: the poll stage would ask %s to stop job %s and apply the cancel rule (stopped: CANCELED and released; finished first: CANCELED_WITH_OUTPUT and charged; unknown: CANCEL_RECONCILING)",
			at, t.Provider, t.ProviderJobID)
	case task.PollActs(t, p.PollAt):
		return preview.Act.Because("poll.due", "the task is %s and this is its next poll: the poll stage would ask %s for job %s and apply its state",
			at, t.Provider, t.ProviderJobID)
	case t.Status != task.ProviderRunning:
		return preview.StaleNoop.Because("poll.stale", "the task is %s, not PROVIDER_RUNNING: the poll stage would record a stale no-op", at)
	}
	next := "none"
	if t.NextPollAt != nil {
		next = t.NextPollAt.UTC().Format(time.RFC3339Nano)
	}
	return preview.StaleNoop.Because("poll.stale", "the poll chain has moved on (next poll %s, this event is for %s): the poll stage would record a stale no-op",
		next, p.PollAt.UTC().Format(time.RFC3339Nano))
}

func decideCallback(s preview.State, p task.CallbackReceived) preview.Verdict {
	t, at := s.Task, preview.At(s.Task)
	if !task.CallbackActs(t, p.Provider, p.ProviderJobID) {
		return preview.StaleNoop.Because("callback.stale", "the task is %s with job %s/%s, the callback is for %s/%s: the poll stage would record a stale no-op",
			at, t.Provider, t.ProviderJobID, p.Provider, p.ProviderJobID)
	}
	if t.CancelRequested {
		return preview.Act.Because("callback.cancel", "the task is %s on job %s and its client asked to cancel: the poll stage would ask %s to stop the job and apply the cancel rule",
			at, t.ProviderJobID, t.Provider)
	}
	return preview.Act.Because("callback.apply", "the task is %s on job %s: the poll stage would ask %s for the job's state and apply it if it finished",
		at, t.ProviderJobID, t.Provider)
}
