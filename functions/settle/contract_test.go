package settle_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/settle"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/task"
)

func TestStageContract(t *testing.T) {
	t.Parallel()
	stagecontract.Run(t, stagecontract.Stage{
		EventType: catalog.EventSettleRequested,
		Consumer:  catalog.GroupSettle.Name,
		Setup: func(t *testing.T) stagecontract.World {
			check, stagePool := stagecontract.Schema(t)
			tk := taskIn(t, check, task.Succeeded, true)
			return stagecontract.World{
				Func:     settle.New(settle.Params{Pool: stagePool}),
				Check:    check,
				Task:     tk,
				Payload:  map[string]any{"task_id": tk.ID, "status": task.Succeeded},
				Required: "task_id",
				Effects: func(t *testing.T) int {
					n, _ := captures(t, check, tk.TenantID)
					return n
				},
				// Settled already, by another settle event.
				MakeStale: func(t *testing.T) {
					require.NoError(t, pgx.BeginFunc(t.Context(), check, func(tx pgx.Tx) error {
						_, err := billing.Capture(t.Context(), tx, tk.ID)
						return err
					}))
				},
				Break: func(*testing.T) { stagePool.Close() },
			}
		},
	})
}
