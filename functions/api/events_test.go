package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/api"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
)

type sseEvent struct {
	id, event, data string
}

type stream struct {
	events   chan sseEvent
	comments chan string
	close    func() // ends the stream from the client's side; idempotent
}

// openStream opens GET /v1/events and returns once the server said it is
// connected: every change published from then on is delivered.
func (b *testBundle) openStream(t *testing.T, key string) *stream {
	t.Helper()
	s, status := b.tryOpenStream(t, key)
	require.Equal(t, http.StatusOK, status)
	return s
}

// tryOpenStream is openStream that reports a refusal: no stream and the
// status code.
func (b *testBundle) tryOpenStream(t *testing.T, key string) (*stream, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.http.URL+"/v1/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := b.http.Client().Do(req)
	require.NoError(t, err)
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		cancel()
		return nil, resp.StatusCode
	}
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
	s.close = sync.OnceFunc(func() {
		cancel()
		_ = resp.Body.Close()
		wg.Wait()
	})
	t.Cleanup(s.close)
	select {
	case c := <-s.comments:
		require.Equal(t, "connected", c)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream did not say it is connected")
	}
	return s, resp.StatusCode
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

// change is the change of a task to version v, as the notify stage
// publishes it.
func change(tenantID, taskID uuid.UUID, v int64, from, to task.Status) live.Change {
	return live.Change{EventID: uuid.NewString(), TaskID: taskID, TenantID: tenantID, From: string(from), To: string(to),
		Version: v, At: time.Now().UTC().Truncate(time.Millisecond)}
}

func TestEventsStreamTheTenantsChangesInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runEvents(t)
	tenantA, keyA := b.tenant(t, 1000, tenant.RoleTenant)
	tenantB, keyB := b.tenant(t, 1000, tenant.RoleTenant)
	streamA := b.openStream(t, keyA)
	streamB := b.openStream(t, keyB)
	taskA, taskB := uuid.New(), uuid.New()

	statuses := []task.Status{task.Queued, task.Submitting, task.ProviderRunning, task.Fetching, task.MediaProcessing, task.Succeeded}
	var want []live.Change
	for i, to := range statuses {
		var from task.Status
		if i > 0 {
			from = statuses[i-1]
		}
		want = append(want, change(tenantA, taskA, int64(i+1), from, to))
	}
	// The notify stage runs at least once: the third change arrives twice,
	// with the same event id.
	want = slices.Insert(want, 3, want[2])

	// B's changes, a change on A's channel that names B, and a payload
	// that is not a change are published between A's: a leak would show
	// up before A's last change.
	impostor, err := json.Marshal(change(tenantB, uuid.New(), 1, "", task.Queued))
	require.NoError(t, err)
	for i, c := range want {
		b.publish(t, c)
		switch i {
		case 0:
			b.publish(t, change(tenantB, taskB, 1, "", task.Queued))
		case 1:
			require.NoError(t, b.rdb.Publish(t.Context(), live.Channel(tenantA), impostor).Err())
		case 2:
			require.NoError(t, b.rdb.Publish(t.Context(), live.Channel(tenantA), "not a change").Err())
		case 3:
			b.publish(t, change(tenantB, taskB, 2, task.Queued, task.Submitting))
		}
	}

	for _, w := range want {
		ev := streamA.next(t)
		require.Equal(t, "task.state.changed", ev.event)
		require.Equal(t, fmt.Sprintf("%s:%d", taskA, w.Version), ev.id)
		var got live.Change
		require.NoError(t, json.Unmarshal([]byte(ev.data), &got))
		require.Equal(t, w, got, "tenant A's changes, in order, whole")
	}
	for _, v := range []int64{1, 2} {
		var got live.Change
		require.NoError(t, json.Unmarshal([]byte(streamB.next(t).data), &got))
		require.Equal(t, taskB, got.TaskID)
		require.Equal(t, tenantB, got.TenantID)
		require.Equal(t, v, got.Version)
	}
	// Nothing else follows: the hub reads one subscription and hands each
	// stream its frames in the order Redis took the publishes, so a marker
	// published last is the next event unless another one is still due.
	for _, s := range []struct {
		name     string
		tenantID uuid.UUID
		stream   *stream
	}{{"A", tenantA, streamA}, {"B", tenantB, streamB}} {
		marker := uuid.New()
		b.publish(t, change(s.tenantID, marker, 1, "", task.Queued))
		ev := s.stream.next(t)
		require.Equal(t, fmt.Sprintf("%s:1", marker), ev.id, "tenant %s received another event: %+v", s.name, ev)
	}
}

func TestEventsAreBoundedPerTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.runEvents(t)
	_, key := b.tenant(t, 0, tenant.RoleTenant)
	_, other := b.tenant(t, 0, tenant.RoleTenant)
	streams := make([]*stream, api.MaxStreamsPerTenant)
	for i := range streams {
		streams[i] = b.openStream(t, key)
	}

	r := b.do(t, http.MethodGet, "/v1/events", key, "")
	require.Equal(t, http.StatusTooManyRequests, r.status)
	require.Equal(t, "too_many_streams", r.errorCode(t))
	b.openStream(t, other) // other tenants are not affected

	// A stream the client closes frees its place, once the server has
	// noticed.
	streams[0].close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, status := b.tryOpenStream(t, key); status == http.StatusOK {
			break
		}
		require.True(t, time.Now().Before(deadline), "the closed stream still counts")
		time.Sleep(20 * time.Millisecond)
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

func TestEventsWithoutTheSubscriptionAre503(t *testing.T) {
	t.Parallel()
	b := setup(t) // no runEvents
	_, key := b.tenant(t, 0, tenant.RoleTenant)
	r := b.do(t, http.MethodGet, "/v1/events", key, "")
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, "event_stream_unavailable", r.errorCode(t))
	require.Equal(t, "5", r.header.Get("Retry-After"))
}
