package notify_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/notify"
	"github.com/aivedio/pipeline/functions/stage/stagecontract"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/task"
)

// TestStageContract: notify keeps nothing in PostgreSQL; its effect is a
// push to the tenant's subscribers, once per task version.
func TestStageContract(t *testing.T) {
	t.Parallel()
	stagecontract.Run(t, stagecontract.Stage{
		EventType: catalog.EventTaskStateChanged,
		Setup: func(t *testing.T) stagecontract.World {
			tk := task.Task{ID: uuid.New(), TenantID: uuid.New()}
			pushes := subscribe(t, stagetest.NewRedis(t), tk.TenantID)
			// The function's own client, which Break closes.
			opts := stagetest.NewRedis(t).Options()
			rdb := redis.NewClient(opts)
			t.Cleanup(func() { _ = rdb.Close() })
			return stagecontract.World{
				Func: notify.New(notify.Params{Redis: rdb}),
				Task: tk,
				Payload: map[string]any{"task_id": tk.ID, "tenant_id": tk.TenantID, "from": task.Queued, "to": task.Submitting,
					"version": 2, "at": time.Now().UTC()},
				Required: "to",
				Effects:  pushes,
				// A newer version of the task was pushed already.
				MakeStale: func(t *testing.T) {
					pushed, err := live.PublishNewer(t.Context(), stagetest.NewRedis(t), live.Change{TaskID: tk.ID, TenantID: tk.TenantID,
						To: string(task.ProviderRunning), Version: 5})
					require.NoError(t, err)
					require.True(t, pushed)
				},
				Break: func(*testing.T) { _ = rdb.Close() },
			}
		},
	})
}

// subscribe follows the tenant's channel and returns how many changes it
// has received, once a moment has passed without a new one.
func subscribe(t *testing.T, rdb *redis.Client, tenantID uuid.UUID) func(*testing.T) int {
	t.Helper()
	sub := live.Subscribe(t.Context(), rdb, tenantID)
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.ReceiveTimeout(t.Context(), 10*time.Second) // the subscription's confirmation
	require.NoError(t, err)
	var n atomic.Int64
	go func() {
		for range sub.Channel() {
			n.Add(1)
		}
	}()
	return func(*testing.T) int {
		for {
			before := n.Load()
			time.Sleep(100 * time.Millisecond)
			if n.Load() == before {
				return int(before)
			}
		}
	}
}
