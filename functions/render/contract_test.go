package render_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/render"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/project"
	renders "github.com/aivedio/pipeline/shared/render"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/timeline"
)

// TestStageContract runs the contract on a render's start step, which
// plans the chunks from the database alone.
func TestStageContract(t *testing.T) {
	t.Parallel()
	stagecontract.Run(t, stagecontract.Stage{
		EventType: catalog.EventRenderRequested,
		Consumer:  catalog.GroupRender.Name,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			j := queuedRender(t, check)
			return stagecontract.World{
				Func:     render.New(render.Params{Pool: stagePool}),
				Check:    check,
				Task:     task.Task{ID: j.ID, TenantID: j.TenantID}, // the render is the events' aggregate
				Payload:  map[string]any{"render_id": j.ID, "step": task.RenderStart},
				Required: "render_id",
				Effects: func(t *testing.T) int {
					var n int
					require.NoError(t, check.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE event_type = $1`,
						catalog.EventRenderRequested).Scan(&n))
					return n
				},
				MakeStale: func(t *testing.T) {
					require.NoError(t, pgx.BeginFunc(t.Context(), check, func(tx pgx.Tx) error {
						_, err := renders.Move(t.Context(), tx, j, renders.Change{To: renders.Canceled})
						return err
					}))
				},
				Break: func(*testing.T) { stagePool.Close() },
			}
		},
	})
}

// queuedRender is a QUEUED render of a one-clip revision.
func queuedRender(t *testing.T, pool *pgxpool.Pool) renders.Job {
	t.Helper()
	tenantID, _ := stagetest.NewTenant(t, pool)
	pr, err := project.Create(t.Context(), pool, tenantID, "contract")
	require.NoError(t, err)
	spec := timeline.Spec{Clips: []timeline.Clip{{AssetID: uuid.New(), InUS: 0, OutUS: 3_000_000}}, DurationUS: 3_000_000}
	rev, _, err := project.AddRevision(t.Context(), pool, pr, project.FormatTimeline, json.RawMessage(`{}`), spec, project.MaxRevisions)
	require.NoError(t, err)
	var j renders.Job
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		j, _, err = renders.Create(t.Context(), tx, renders.New{TenantID: tenantID, RevisionID: rev.ID, SpecID: "spec",
			Profile: "720p30-h264", Key: strings.Repeat("ab", 32), DurationUS: spec.DurationUS,
			IdempotencyKey: uuid.NewString(), RequestHash: []byte{1}})
		return err
	}))
	return j
}
