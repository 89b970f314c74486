package reconcile_test

import (
	"testing"
	"time"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// TestStageContract: the reconciler's lookup of a lost submit, which finds
// the job: a lookup that acts starts its poll chain.
func TestStageContract(t *testing.T) {
	t.Parallel()
	stagecontract.Run(t, stagecontract.Stage{
		EventType: catalog.EventReconcileDue,
		Consumer:  catalog.GroupReconcile.Name,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk, a := reconcilingTask(t, check)
			found := &fakeProvider{find: func(int) (provider.Job, error) {
				return provider.Job{ID: "job-found", ClientRequestID: a.ClientRequestID, Status: provider.StatusRunning}, nil
			}}
			return stagecontract.World{
				Func:      reconcile.New(reconcile.Params{Pool: stagePool, Providers: provider.Single(found), Journey: journey, Timeout: time.Second}),
				Check:     check,
				Task:      tk,
				Payload:   map[string]any{"task_id": tk.ID, "attempt_id": a.ID, "reason": "submit answer lost"},
				Required:  "attempt_id",
				Effects:   func(t *testing.T) int { return len(storedEvents(t, check, catalog.EventPollDue)) },
				Work:      func(*testing.T) int { return found.calls() },
				MakeStale: func(t *testing.T) { stagetest.Advance(t, check, tk.ID, task.Transition{To: task.NeedsAttention}) },
				Break:     func(*testing.T) { stagePool.Close() },
			}
		},
	})
}
