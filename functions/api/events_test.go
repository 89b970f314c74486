package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

type sseEvent struct {
	id, event, data string
}

type stream struct {
	events   chan sseEvent
	comments chan string
}

// openStream opens GET /v1/events and returns once the server said it is
// connected: every change committed from then on is delivered.
func (b *testBundle) openStream(t *testing.T, key string) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.http.URL+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := b.http.Client().Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))

	s := &stream{events: make(chan sseEvent, 100), comments: make(chan string, 100)}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.event != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				select {
				case s.comments <- strings.TrimSpace(line[1:]):
				default:
				}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	})
	t.Cleanup(func() {
		cancel()
		_ = resp.Body.Close()
		wg.Wait()
	})
	select {
	case c := <-s.comments:
		require.Equal(t, "connected", c)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not say it is connected")
	}
	return s
}

// next returns the next event, failing after a while.
func (s *stream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-s.events:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return sseEvent{}
}

func TestEventsStreamTheTenantsChangesInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runEvents(t)
	tenantA, keyA := b.tenant(t, 1000, tenant.RoleTenant)
	tenantB, keyB := b.tenant(t, 1000, tenant.RoleTenant)
	streamA := b.openStream(t, keyA)
	streamB := b.openStream(t, keyB)

	// B's changes are committed between A's, so a leak would show up
	// before A's last event.
	taskB := b.createTask(t, keyB)
	taskA := b.createTask(t, keyA)
	b.move(t, taskB, task.Submitting)
	b.move(t, taskA, task.Submitting, task.ProviderRunning)
	require.Equal(t, http.StatusAccepted, b.cancel(t, keyA, taskA).status)
	b.move(t, taskA, task.Fetching, task.MediaProcessing, task.Succeeded)

	want := []task.Status{task.Queued, task.Submitting, task.ProviderRunning, task.Fetching, task.MediaProcessing, task.Succeeded}
	for i, to := range want {
		ev := streamA.next(t)
		version := i + 1
		require.Equal(t, "task.state.changed", ev.event)
		require.Equal(t, fmt.Sprintf("%s:%d", taskA, version), ev.id)
		var change task.StateChanged
		require.NoError(t, json.Unmarshal([]byte(ev.data), &change))
		require.Equal(t, taskA, change.TaskID, "only tenant A's task")
		require.Equal(t, tenantA, change.TenantID)
		require.Equal(t, to, change.To)
		require.EqualValues(t, version, change.Version)
		if i > 0 {
			require.Equal(t, want[i-1], change.From)
		}
	}

	for _, to := range []task.Status{task.Queued, task.Submitting} {
		var change task.StateChanged
		require.NoError(t, json.Unmarshal([]byte(streamB.next(t).data), &change))
		require.Equal(t, taskB, change.TaskID)
		require.Equal(t, tenantB, change.TenantID)
		require.Equal(t, to, change.To)
	}
	select {
	case ev := <-streamB.events:
		t.Fatalf("tenant B received another event: %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestEventsSendHeartbeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runEvents(t)
	_, key := b.tenant(t, 0, tenant.RoleTenant)
	s := b.openStream(t, key)
	select {
	case c := <-s.comments:
		require.Equal(t, "heartbeat", c)
	case <-time.After(5 * time.Second):
		t.Fatal("no heartbeat")
	}
}

func TestEventsWithoutTheListenerAre503(t *testing.T) {
	t.Parallel()
	b := setup(t) // no runEvents
	_, key := b.tenant(t, 0, tenant.RoleTenant)
	r := b.do(t, http.MethodGet, "/v1/events", key, "")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, "event_stream_unavailable", r.errorCode(t))
	require.Equal(t, "5", r.header.Get("Retry-After"))
}
