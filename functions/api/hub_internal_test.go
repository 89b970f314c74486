package api

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func listeningHub(t *testing.T) *hub {
	t.Helper()
	h := newHub(nil, slog.New(slog.DiscardHandler), nil)
	h.setListening(true, "")
	return h
}

func subscribe(t *testing.T, h *hub, tenantID uuid.UUID) *subscriber {
	t.Helper()
	s, err := h.subscribe(t.Context(), tenantID)
	require.NoError(t, err)
	return s
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
	h := listeningHub(t)
	tenantID := uuid.New()
	slow := subscribe(t, h, tenantID)
	fast := subscribe(t, h, tenantID)

	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range streamBuffer + 10 {
			h.dispatch(tenantID, []byte{byte(i)})
			// The fast stream keeps up; the slow one reads nothing.
			<-fast.ch
		}
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("dispatch blocked on a slow stream")
	}

	frames, closed := drain(slow)
	require.True(t, closed, "the slow stream is closed")
	require.Len(t, frames, streamBuffer, "what it had buffered is still readable, in order")
	for i, f := range frames {
		require.Equal(t, string([]byte{byte(i)}), f)
	}
	require.Equal(t, closedTooSlow, slow.reason)
	_, closed = drain(fast)
	require.False(t, closed)

	h.unsubscribe(slow) // the handler's deferred unsubscribe after a drop is harmless
	h.unsubscribe(fast)
	require.Empty(t, h.subs)
}

func TestHubRoutesByTenant(t *testing.T) {
	t.Parallel()
	h := listeningHub(t)
	a, b := uuid.New(), uuid.New()
	sa, sb := subscribe(t, h, a), subscribe(t, h, b)
	h.dispatch(a, []byte("for a"))
	frames, _ := drain(sa)
	require.Equal(t, []string{"for a"}, frames)
	frames, _ = drain(sb)
	require.Empty(t, frames)
}

func TestHubClosesStreamsWhenTheListenerIsLost(t *testing.T) {
	t.Parallel()
	h := listeningHub(t)
	s := subscribe(t, h, uuid.New())
	h.setListening(false, closedListenerLost)
	_, closed := drain(s)
	require.True(t, closed)
	require.Equal(t, closedListenerLost, s.reason)

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := h.subscribe(ctx, uuid.New())
	require.ErrorIs(t, err, errNotListening, "no new stream while notifications would be missed")
}

func TestHubBoundsStreamsPerTenant(t *testing.T) {
	t.Parallel()
	h := listeningHub(t)
	tenantID := uuid.New()
	for range maxStreamsPerTenant {
		subscribe(t, h, tenantID)
	}
	_, err := h.subscribe(t.Context(), tenantID)
	require.ErrorIs(t, err, errTooManyStreams)
	subscribe(t, h, uuid.New()) // other tenants are not affected
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
