package transcode_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/transcode"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	"github.com/aivedio/pipeline/shared/task"
)

func TestStageContract(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, Width: 160, Height: 120, Rate: 10})
	stagecontract.Run(t, stagecontract.Stage{
		EventType:  catalog.EventPostprocess,
		Consumer:   catalog.GroupTranscode.Name,
		ReadsAsset: true,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk := processingTask(t, check)
			source := storeProbedOutput(t, check, store, tk, path, true)
			removeAfter(t, store, derivativeKey(t, tk, "thumbnail", "thumbnail.jpg"))
			payload := map[string]any{"task_id": tk.ID, "asset_id": source, "step": catalog.TagThumbnail}
			tool, runs := stagetest.CountingTool(t)
			return stagecontract.World{
				Func:     transcode.New(transcode.Params{Pool: stagePool, Blob: store, Media: tool, TmpDir: t.TempDir()}),
				Check:    check,
				Task:     tk,
				Payload:  payload,
				Required: "asset_id",
				Effects: func(t *testing.T) int {
					var n int
					require.NoError(t, check.QueryRow(t.Context(), `SELECT count(*) FROM assets WHERE source_asset_id = $1`, source).Scan(&n))
					return n
				},
				Work:      runs.Count,
				MakeStale: func(t *testing.T) { stagetest.Advance(t, check, tk.ID, task.Transition{To: task.Failed}) },
				Break:     func(*testing.T) { stagePool.Close() },
				ForeignAsset: func(t *testing.T) map[string]any {
					stranger := processingTask(t, check)
					_, err := check.Exec(t.Context(), `UPDATE assets SET tenant_id = $2 WHERE asset_id = $1`, source, stranger.TenantID)
					require.NoError(t, err)
					return payload
				},
			}
		},
	})
}
