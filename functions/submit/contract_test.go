package submit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

func TestStageContract(t *testing.T) {
	t.Parallel()
	stagecontract.Run(t, stagecontract.Stage{
		EventType: catalog.EventSubmitRequested,
		Consumer:  catalog.GroupSubmit.Name,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk := stagetest.NewTask(t, check, nil)
			fake := &fakeProvider{answer: accepted}
			fn := submit.New(submit.Params{Pool: stagePool, Providers: provider.Single(fake), Journey: journey, Timeout: time.Second})
			return stagecontract.World{
				Func:     fn,
				Check:    check,
				Task:     tk,
				Payload:  map[string]any{"task_id": tk.ID, "version": tk.Version},
				Required: "task_id",
				// Each submit that acts opens an attempt.
				Effects: func(t *testing.T) int {
					var n int
					require.NoError(t, check.QueryRow(t.Context(), `SELECT count(*) FROM task_attempts WHERE task_id = $1`, tk.ID).Scan(&n))
					return n
				},
				Work:      func(*testing.T) int { return fake.submits() },
				MakeStale: func(t *testing.T) { stagetest.Advance(t, check, tk.ID, task.Transition{To: task.Canceled}) },
				Break:     func(*testing.T) { stagePool.Close() },
			}
		},
	})
}
