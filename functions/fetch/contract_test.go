package fetch_test

import (
	"testing"
	"time"

	"github.com/aivedio/pipeline/functions/fetch"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

func TestStageContract(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	stagecontract.Run(t, stagecontract.Stage{
		EventType: catalog.EventFetchRequested,
		Consumer:  catalog.GroupFetch.Name,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk, attemptID := fetchingTask(t, check)
			removeAfter(t, store, outputKey(t, tk))
			download, _ := video(16<<10, true)
			fake := &fakeProvider{download: download}
			fn := fetch.New(fetch.Params{Pool: stagePool, Providers: provider.Single(fake), Blob: store,
				Timeout: 5 * time.Second, Journey: journey})
			return stagecontract.World{
				Func:     fn,
				Check:    check,
				Task:     tk,
				Payload:  map[string]any{"task_id": tk.ID, "attempt_id": attemptID},
				Required: "task_id",
				Effects:  func(t *testing.T) int { return len(assets(t, check, tk.ID)) },
				// The download is the provider call and the S3 upload.
				Work: func(*testing.T) int { gets, downloads := fake.counts(); return gets + downloads },
				// The output is stored already: the task is processing it.
				MakeStale: func(t *testing.T) { stagetest.Advance(t, check, tk.ID, task.Transition{To: task.MediaProcessing}) },
				Break:     func(*testing.T) { stagePool.Close() },
			}
		},
	})
}
