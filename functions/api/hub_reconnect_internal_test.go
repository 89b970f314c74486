package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/task"
)

// TestHubReconnectsAfterLosingItsConnection kills the listening backend:
// open streams close (they would miss changes), and the hub reconnects and
// serves new streams.
func TestHubReconnectsAfterLosingItsConnection(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	h := newHub(pool, slog.New(slog.NewTextHandler(t.Output(), nil)), nil)
	// Idle waits time out and ping often; the connection must survive them.
	h.check = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() { require.NoError(t, h.run(ctx)) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	tenantID := uuid.New()
	notify := func(version int64) {
		t.Helper()
		payload, err := json.Marshal(task.StateChanged{TaskID: uuid.New(), TenantID: tenantID, To: task.Queued, Version: version})
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `SELECT pg_notify($1, $2)`, task.NotifyChannel, string(payload))
		require.NoError(t, err)
	}
	receive := func(s *subscriber) string {
		t.Helper()
		select {
		case f, ok := <-s.ch:
			require.True(t, ok, "stream closed: %s", s.reason)
			return string(f)
		case <-time.After(10 * time.Second):
			t.Fatal("no event")
		}
		return ""
	}

	wait, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	s, err := h.subscribe(wait, tenantID)
	require.NoError(t, err)
	notify(1)
	require.Contains(t, receive(s), `"version":1`)
	pid := h.backendPID.Load()
	time.Sleep(200 * time.Millisecond) // several idle timeouts and pings
	notify(2)
	require.Contains(t, receive(s), `"version":2`)
	require.Equal(t, pid, h.backendPID.Load(), "idle timeouts keep the connection")

	require.NotZero(t, pid)
	_, err = pool.Exec(t.Context(), `SELECT pg_terminate_backend($1)`, int32(pid))
	require.NoError(t, err)
	select {
	case _, ok := <-s.ch:
		require.False(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after the listener lost its connection")
	}
	require.Equal(t, closedListenerLost, s.reason)

	s, err = h.subscribe(wait, tenantID)
	require.NoError(t, err, "the hub reconnects")
	require.NotEqual(t, pid, h.backendPID.Load())
	notify(3)
	f := receive(s)
	require.True(t, strings.HasPrefix(f, "id: "), f)
	require.Contains(t, f, "event: task.state.changed\n")
	require.Contains(t, f, `"version":3`)
}
