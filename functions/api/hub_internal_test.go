package api

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/task"
)

type hubBundle struct {
	hub *hub
	// name is the CLIENT SETNAME of the hub's connections, which tells its
	// subscription from those of the tests running beside it.
	name string
	// admin is a second client: it publishes, as the notify stage does,
	// and kills the hub's connection.
	admin *redis.Client
}

// redisOptions are the test Redis's (REDIS_URL).
func redisOptions(t *testing.T) *redis.Options {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	return opts
}

// startHub runs a hub on the test Redis until the test ends, checking an
// idle subscription every check, and waits until it is subscribed.
// configure, when not nil, adjusts the hub client's options.
func startHub(t *testing.T, check time.Duration, configure func(*redis.Options)) *hubBundle {
	t.Helper()
	opts := redisOptions(t)
	name := "api-hub-test-" + uuid.NewString()
	opts.ClientName = name
	if configure != nil {
		configure(opts)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { require.NoError(t, rdb.Close()) })
	admin := redis.NewClient(redisOptions(t))
	t.Cleanup(func() { require.NoError(t, admin.Close()) })

	h := newHub(rdb, slog.New(slog.NewTextHandler(t.Output(), nil)), nil)
	h.check = check
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, h.run(ctx)) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		require.Empty(t, h.subs, "run closes every stream when it returns")
	})
	b := &hubBundle{hub: h, name: name, admin: admin}
	b.waitSubscribed(t)
	return b
}

// waitSubscribed waits until the hub takes streams again.
func (b *hubBundle) waitSubscribed(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	h := b.hub
	h.mu.Lock()
	up := h.up
	h.mu.Unlock()
	select {
	case <-up:
	case <-ctx.Done():
		t.Fatal("the hub did not subscribe within 10s")
	}
}

// publish sends version v of a task's change to the tenant's channel.
func (b *hubBundle) publish(t *testing.T, tenantID, taskID uuid.UUID, v int64) {
	t.Helper()
	_, err := live.Publish(t.Context(), b.admin, live.Change{EventID: uuid.NewString(), TaskID: taskID, TenantID: tenantID,
		To: string(task.Queued), Version: v, At: time.Now().UTC()})
	require.NoError(t, err)
}

// subscriptions are the ids of the hub's pub/sub connections on the server.
func (b *hubBundle) subscriptions(t *testing.T) []int64 {
	t.Helper()
	list, err := b.admin.Do(t.Context(), "CLIENT", "LIST", "TYPE", "pubsub").Text()
	require.NoError(t, err)
	var ids []int64
	for line := range strings.Lines(list) {
		fields := map[string]string{}
		for f := range strings.FieldsSeq(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if fields["name"] == b.name {
			id, err := strconv.ParseInt(fields["id"], 10, 64)
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	return ids
}

func subscribe(t *testing.T, h *hub, tenantID uuid.UUID) *subscriber {
	t.Helper()
	s, err := h.subscribe(t.Context(), tenantID)
	require.NoError(t, err)
	return s
}

// receive returns the next frame of s, failing when s closes or stays
// silent.
func receive(t *testing.T, s *subscriber) string {
	t.Helper()
	select {
	case f, ok := <-s.ch:
		require.True(t, ok, "stream closed: %s", s.reason)
		return string(f)
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return ""
}

// requireClosed waits for the hub to close s for reason.
func requireClosed(t *testing.T, s *subscriber, reason string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-s.ch:
			if !ok {
				require.Equal(t, reason, s.reason)
				return
			}
		case <-timeout:
			t.Fatalf("the stream stayed open; want it closed for %s", reason)
		}
	}
}

// drain reads what s holds now and whether it was closed.
func drain(s *subscriber) (frames []string, closed bool) {
	for {
		select {
		case f, ok := <-s.ch:
			if !ok {
				return frames, true
			}
			frames = append(frames, string(f))
		default:
			return frames, false
		}
	}
}

func TestHubDropsASlowStreamWithoutBlockingOthers(t *testing.T) {
	t.Parallel()
	b := startHub(t, receiveCheck, nil)
	h := b.hub
	tenantID, taskID := uuid.New(), uuid.New()
	slow := subscribe(t, h, tenantID)
	fast := subscribe(t, h, tenantID)

	for v := range int64(streamBuffer + 10) {
		b.publish(t, tenantID, taskID, v+1)
		// The fast stream keeps up; the slow one reads nothing. Had the
		// hub waited for the slow one, the fast one would starve here.
		require.True(t, strings.HasPrefix(receive(t, fast), fmt.Sprintf("id: %s:%d\n", taskID, v+1)))
	}

	frames, closed := drain(slow)
	require.True(t, closed, "the slow stream is closed")
	require.Equal(t, closedTooSlow, slow.reason)
	require.Len(t, frames, streamBuffer, "what it had buffered is still readable, in order")
	for i, f := range frames {
		require.True(t, strings.HasPrefix(f, fmt.Sprintf("id: %s:%d\n", taskID, i+1)), f)
	}
	_, closed = drain(fast)
	require.False(t, closed)

	h.unsubscribe(slow) // the handler's deferred unsubscribe after a drop is harmless
	h.unsubscribe(fast)
	require.Empty(t, h.subs)
}

func TestHubBoundsStreamsPerTenant(t *testing.T) {
	t.Parallel()
	b := startHub(t, receiveCheck, nil)
	tenantID := uuid.New()
	for range maxStreamsPerTenant {
		subscribe(t, b.hub, tenantID)
	}
	_, err := b.hub.subscribe(t.Context(), tenantID)
	require.ErrorIs(t, err, errTooManyStreams)
	subscribe(t, b.hub, uuid.New()) // other tenants are not affected
}

func TestHubRefusesStreamsUntilSubscribed(t *testing.T) {
	t.Parallel()
	h := newHub(nil, slog.New(slog.DiscardHandler), nil) // never run
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := h.subscribe(ctx, uuid.New())
	require.ErrorIs(t, err, errNotSubscribed)
}

func TestCanonicalHashIgnoresSpellingNotMeaning(t *testing.T) {
	t.Parallel()
	base := createRequest{Model: "m", Prompt: "p", DurationSeconds: 4, Resolution: "1280x720"}
	require.Equal(t, base.hash(), base.hash())
	for _, other := range []createRequest{
		{Model: "m2", Prompt: "p", DurationSeconds: 4, Resolution: "1280x720"},
		{Model: "m", Prompt: "p ", DurationSeconds: 4, Resolution: "1280x720"},
		{Model: "m", Prompt: "p", DurationSeconds: 5, Resolution: "1280x720"},
		{Model: "m", Prompt: "p", DurationSeconds: 4, Resolution: "640x360"},
		{Model: "m", Prompt: "p", DurationSeconds: 4, Resolution: "1280x720", Priority: 1},
		{Model: "m", Prompt: "p", DurationSeconds: 4, Resolution: "1280x720", InputAssetIDs: []uuid.UUID{uuid.New()}},
	} {
		require.NotEqual(t, base.hash(), other.hash(), "%+v", other)
	}
}
