package probe_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/probe"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/task"
)

func TestStageContract(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := clip(t, false)
	stagecontract.Run(t, stagecontract.Stage{
		EventType:  catalog.EventPostprocess,
		Consumer:   catalog.GroupProbe.Name,
		ReadsAsset: true,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk := processingTask(t, check)
			assetID := storeOutput(t, check, store, tk, path)
			payload := map[string]any{"task_id": tk.ID, "asset_id": assetID, "step": catalog.TagProbe}
			tool, runs := stagetest.CountingTool(t)
			return stagecontract.World{
				Func:      probe.New(probe.Params{Pool: stagePool, Blob: store, Media: tool}),
				Check:     check,
				Task:      tk,
				Payload:   payload,
				Required:  "asset_id",
				Effects:   func(t *testing.T) int { return len(storedEvents(t, check, catalog.EventPostprocess)) },
				Work:      runs.Count,
				MakeStale: func(t *testing.T) { stagetest.Advance(t, check, tk.ID, task.Transition{To: task.Failed}) },
				Break:     func(*testing.T) { stagePool.Close() },
				ForeignAsset: func(t *testing.T) map[string]any {
					stranger := processingTask(t, check)
					_, err := check.Exec(t.Context(), `UPDATE assets SET tenant_id = $2 WHERE asset_id = $1`, assetID, stranger.TenantID)
					require.NoError(t, err)
					return payload
				},
			}
		},
	})
}
