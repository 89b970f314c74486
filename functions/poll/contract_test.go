package poll_test

import (
	"testing"
	"time"

	"github.com/aivedio/pipeline/functions/poll"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// TestStageContract runs the contract for both events the poll stage
// takes: a due poll, and a provider's callback.
func TestStageContract(t *testing.T) {
	t.Parallel()
	// world is a running task whose job the provider says succeeded: a
	// poll or callback that acts asks for its fetch.
	world := func(t *testing.T, payload func(tk task.Task, attemptID string) map[string]any, required string) stagecontract.World {
		check, stagePool := stagecontract.Schema(t)
		tk, attemptID := runningTask(t, check, time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond))
		fake := &fakeProvider{job: jobIs(provider.StatusSucceeded)}
		fn := poll.New(poll.Params{Pool: stagePool, Providers: provider.Single(fake), Journey: journey, Timeout: time.Second})
		return stagecontract.World{
			Func:      fn,
			Check:     check,
			Task:      tk,
			Payload:   payload(tk, attemptID.String()),
			Required:  required,
			Effects:   func(t *testing.T) int { return len(storedEvents(t, check, catalog.EventFetchRequested)) },
			Work:      func(*testing.T) int { return fake.calls() },
			MakeStale: func(t *testing.T) { stagetest.Advance(t, check, tk.ID, task.Transition{To: task.Failed}) },
			Break:     func(*testing.T) { stagePool.Close() },
		}
	}
	t.Run("poll due", func(t *testing.T) {
		t.Parallel()
		stagecontract.Run(t, stagecontract.Stage{
			EventType: catalog.EventPollDue,
			Consumer:  catalog.GroupPoll.Name,
			Setup: func(t *testing.T) stagecontract.World {
				return world(t, func(tk task.Task, attemptID string) map[string]any {
					return map[string]any{"task_id": tk.ID, "attempt_id": attemptID, "poll_at": tk.NextPollAt}
				}, "attempt_id")
			},
		})
	})
	t.Run("callback", func(t *testing.T) {
		t.Parallel()
		stagecontract.Run(t, stagecontract.Stage{
			EventType: catalog.EventCallbackReceived,
			Consumer:  catalog.GroupCallback.Name,
			Setup: func(t *testing.T) stagecontract.World {
				return world(t, func(task.Task, string) map[string]any {
					return map[string]any{"provider": providerName, "provider_job_id": jobID}
				}, "provider_job_id")
			},
		})
	})
}
