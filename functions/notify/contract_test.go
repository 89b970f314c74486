package notify_test

import (
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
// has received from everything published so far. Redis delivers one
// channel's messages to a subscriber in the order it took the publishes:
// a marker published after the deliveries arrives after every push they
// made, so counting up to the marker counts all of them.
func subscribe(t *testing.T, rdb *redis.Client, tenantID uuid.UUID) func(*testing.T) int {
	t.Helper()
	sub := live.Subscribe(t.Context(), rdb, tenantID)
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.ReceiveTimeout(t.Context(), 10*time.Second) // the subscription's confirmation
	require.NoError(t, err)
	msgs := sub.Channel()
	var n int
	return func(t *testing.T) int {
		t.Helper()
		marker := "contract marker " + uuid.NewString()
		require.NoError(t, rdb.Publish(t.Context(), live.Channel(tenantID), marker).Err())
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				require.True(t, ok, "the subscription ended")
				if m.Payload == marker {
					return n
				}
				n++
			case <-timeout:
				t.Fatal("the marker did not come back within 10s")
			}
		}
	}
}
