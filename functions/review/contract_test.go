package review_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/review"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/local/reviewsim"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/media/mediatest"
	reviews "github.com/aivedio/pipeline/shared/review"
	"github.com/aivedio/pipeline/shared/task"
)

func TestStageContract(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	sim := startSim(t, reviewsim.DefaultOptions())
	path := mediatest.Clip(t, mediatest.ClipParams{Duration: time.Second, Width: 160, Height: 120, Rate: 10, NoAudio: true})
	stagecontract.Run(t, stagecontract.Stage{
		EventType:  catalog.EventPostprocess,
		Consumer:   catalog.GroupReview.Name,
		ReadsAsset: true,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk := processingTask(t, check)
			source := storeProbedOutput(t, check, store, tk, path)
			require.NoError(t, reviews.Require(t.Context(), check, tk.ID, tk.TenantID, source))
			cfg := testConfig(sim.URL(), sim.Secret())
			cfg.Frames = 1
			key, err := review.FrameKey(tk, 0)
			require.NoError(t, err)
			removeAfter(t, store, key)
			payload := map[string]any{"task_id": tk.ID, "asset_id": source, "step": catalog.TagReview}
			tool, runs := stagetest.CountingTool(t)
			return stagecontract.World{
				Func:     review.New(review.Params{Pool: stagePool, Blob: store, Media: tool, Config: cfg, TmpDir: t.TempDir()}),
				Check:    check,
				Task:     tk,
				Payload:  payload,
				Required: "asset_id",
				// A call recorded (approved, rejected or waited on) is
				// the stage's effect.
				Effects: func(t *testing.T) int {
					var n int
					require.NoError(t, check.QueryRow(t.Context(), `SELECT attempts FROM task_reviews WHERE task_id = $1`, tk.ID).Scan(&n))
					return n
				},
				// The frames ffmpeg takes, and the reviewer's call.
				Work:      func(t *testing.T) int { return runs.Count(t) + sim.Stats().Tasks[tk.ID.String()] },
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
