package notify_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/notify"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
)

type testBundle struct {
	rdb *redis.Client
	sub *redis.PubSub // the tenant's channel, subscribed
	// tenantID owns the task the events are about.
	tenantID, taskID uuid.UUID
}

// setup connects to the test Redis (REDIS_URL) and subscribes to a new
// tenant's channel, as the API's event hub would; both are closed when the
// test ends.
func setup(t *testing.T) *testBundle {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { require.NoError(t, rdb.Close()) })
	b := &testBundle{rdb: rdb, tenantID: uuid.New(), taskID: uuid.New()}
	b.sub = live.Subscribe(t.Context(), rdb, b.tenantID)
	t.Cleanup(func() { require.NoError(t, b.sub.Close()) })
	// Pub/sub delivers only to subscriptions that exist: wait for the
	// confirmation before anything is published.
	msg, err := b.sub.ReceiveTimeout(t.Context(), 10*time.Second)
	require.NoError(t, err)
	require.IsType(t, &redis.Subscription{}, msg)
	return b
}

// event is the task.state.changed event of change, sent by tenant.
func (b *testBundle) event(t *testing.T, tenant uuid.UUID, change task.StateChanged) envelope.Envelope {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventTaskStateChanged, Producer: "submit",
		AggregateType: task.AggregateType, AggregateID: change.TaskID.String(), TenantID: tenant.String(),
		Payload: change,
	})
	require.NoError(t, err)
	return env
}

func TestNotifyPublishesTheChangeWithItsEventIDAndVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	at := time.Now().UTC().Truncate(time.Microsecond)
	change := task.StateChanged{TaskID: b.taskID, TenantID: b.tenantID, From: task.Submitting, To: task.ProviderRunning,
		Version: 3, Progress: 0, At: at}
	env := b.event(t, b.tenantID, change)

	f := notify.New(notify.Params{Redis: b.rdb})
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	_, err = f.Handle(t.Context(), ce)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	msg, err := b.sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	require.Equal(t, live.Channel(b.tenantID), msg.Channel)
	got, err := live.Decode(msg.Payload)
	require.NoError(t, err)
	require.Equal(t, live.Change{EventID: env.EventID, TaskID: b.taskID, TenantID: b.tenantID,
		From: string(task.Submitting), To: string(task.ProviderRunning), Version: 3, At: at}, got)

	// A redelivery, and a change older than one pushed, are not pushed.
	_, err = f.Handle(t.Context(), ce)
	require.NoError(t, err)
	older := b.event(t, b.tenantID, task.StateChanged{TaskID: b.taskID, TenantID: b.tenantID, From: task.Queued, To: task.Submitting, Version: 2, At: at})
	oce, err := older.ToCloudEvent()
	require.NoError(t, err)
	_, err = f.Handle(t.Context(), oce)
	require.NoError(t, err)
	nothing, err := b.sub.ReceiveTimeout(t.Context(), 300*time.Millisecond)
	require.Error(t, err, "received %v", nothing)

	// The next version is.
	next := b.event(t, b.tenantID, task.StateChanged{TaskID: b.taskID, TenantID: b.tenantID, From: task.ProviderRunning, To: task.Fetching, Version: 4, At: at})
	nce, err := next.ToCloudEvent()
	require.NoError(t, err)
	_, err = f.Handle(t.Context(), nce)
	require.NoError(t, err)
	msg, err = b.sub.ReceiveMessage(ctx)
	require.NoError(t, err)
	got, err = live.Decode(msg.Payload)
	require.NoError(t, err)
	require.Equal(t, int64(4), got.Version)
}

func TestNotifyRefusesAnEventThatDisagreesWithItsPayload(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := uuid.New()
	f := notify.New(notify.Params{Redis: b.rdb})
	for name, env := range map[string]envelope.Envelope{
		// The envelope names one tenant, the payload another.
		"tenant mismatch": b.event(t, other, task.StateChanged{TaskID: b.taskID, TenantID: b.tenantID, To: task.Queued, Version: 1}),
		// The change is about another task than the event.
		"task mismatch": func() envelope.Envelope {
			env := b.event(t, b.tenantID, task.StateChanged{TaskID: b.taskID, TenantID: b.tenantID, To: task.Queued, Version: 1})
			env.AggregateID = uuid.NewString()
			return env
		}(),
	} {
		ce, err := env.ToCloudEvent()
		require.NoError(t, err)
		_, err = f.Handle(t.Context(), ce)
		var result *cehttp.Result
		require.True(t, errors.As(err, &result), "%s: %v", name, err)
		require.Equal(t, http.StatusUnprocessableEntity, result.StatusCode, "%s: permanent, so quarantined and not retried", name)
	}

	// Neither reached a subscriber.
	msg, err := b.sub.ReceiveTimeout(t.Context(), 200*time.Millisecond)
	require.Error(t, err, "received %v", msg)
	var ne interface{ Timeout() bool }
	require.True(t, errors.As(err, &ne) && ne.Timeout(), "%v", err)
}
