package live_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/servicetest"
)

func newRedis(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { require.NoError(t, rdb.Close()) })
	return rdb
}

func TestTenantOfReadsOnlyTenantChannels(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	got, ok := live.TenantOf(live.Channel(id))
	require.True(t, ok)
	require.Equal(t, id, got)

	for _, channel := range []string{
		"",
		live.KeyPrefix + "progress:" + id.String(),
		live.KeyPrefix + "tenant:",
		live.KeyPrefix + "tenant:" + uuid.Nil.String(),
		live.KeyPrefix + "tenant:" + id.String() + ":x",
		live.KeyPrefix + "tenant:{" + id.String() + "}", // uuid.Parse would take it
		live.KeyPrefix + "tenant:urn:uuid:" + id.String(),
		"other:tenant:" + id.String(),
	} {
		_, ok := live.TenantOf(channel)
		require.False(t, ok, channel)
	}
}

func TestAllTenantsReceivesEveryTenantsChanges(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t)
	ps := rdb.PSubscribe(t.Context(), live.AllTenants)
	t.Cleanup(func() { require.NoError(t, ps.Close()) })
	_, err := ps.ReceiveTimeout(t.Context(), 10*time.Second)
	require.NoError(t, err)

	want := live.Change{EventID: uuid.NewString(), TaskID: uuid.New(), TenantID: uuid.New(), To: "QUEUED", Version: 1,
		At: time.Now().UTC().Truncate(time.Millisecond)}
	_, err = live.Publish(t.Context(), rdb, want)
	require.NoError(t, err)
	// Other tests publish too, on other tenants' channels.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		msg, err := ps.ReceiveTimeout(ctx, 10*time.Second)
		require.NoError(t, err)
		m, ok := msg.(*redis.Message)
		if !ok || m.Channel != live.Channel(want.TenantID) {
			continue
		}
		got, err := live.Decode(m.Payload)
		require.NoError(t, err)
		require.Equal(t, want, got)
		return
	}
}

func TestProgress(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t)
	id := uuid.New()
	_, ok, err := live.Progress(t.Context(), rdb, id)
	require.NoError(t, err)
	require.False(t, ok, "nothing recorded")

	for set, want := range map[int]int{42: 42, -5: 0, 250: 100} {
		require.NoError(t, live.SetProgress(t.Context(), rdb, id, set, time.Minute))
		got, ok, err := live.Progress(t.Context(), rdb, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, got, "set %d", set)
	}

	require.NoError(t, live.SetProgress(t.Context(), rdb, id, 10, 50*time.Millisecond))
	require.Eventually(t, func() bool {
		_, ok, err := live.Progress(t.Context(), rdb, id)
		return err == nil && !ok
	}, 5*time.Second, 20*time.Millisecond, "progress expires with its ttl")
}
