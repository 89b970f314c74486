package task_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/aggregate/aggregatetest"
	"github.com/aivedio/pipeline/shared/task"
)

func TestKindConforms(t *testing.T) {
	t.Parallel()
	b := setup(t)
	aggregatetest.Exercise(t, aggregatetest.Harness[uuid.UUID, task.Status, task.Task]{
		Kind: task.Kind,
		Pool: b.pool,
		Create: func(t *testing.T, s task.Status) uuid.UUID {
			created := b.newTask(t, uuid.NewString())
			// Put straight into s, as no stage would: the suite needs a row
			// in every state, terminal ones included.
			_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = $2 WHERE task_id = $1`, created.ID, s)
			require.NoError(t, err)
			return created.ID
		},
		Move: func(ctx context.Context, tx pgx.Tx, cur task.Task, to task.Status) error {
			_, err := task.Apply(ctx, tx, api, cur, task.Transition{To: to, Reason: "conformance"})
			return err
		},
	})
}

func TestLegalIsTheKindsTable(t *testing.T) {
	t.Parallel()
	for _, from := range task.All() {
		for _, to := range task.All() {
			require.Equal(t, task.Kind.Moves.Legal(from, to), task.Legal(from, to), "%s -> %s", from, to)
		}
	}
}
