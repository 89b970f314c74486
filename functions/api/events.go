package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/aivedio/pipeline/shared/tenant"
)

const (
	// streamOpenWait is how long a new stream waits for the Redis
	// subscription (at start-up or while it is renewed) before a 503.
	streamOpenWait = 5 * time.Second
	// streamWriteTimeout bounds one write to a stream; a client that takes
	// longer is gone or too slow, and its stream ends.
	streamWriteTimeout = 10 * time.Second
)

// streamEvents serves GET /v1/events: the tenant's task.state.changed
// events as server-sent events, live, in order per task, possibly
// repeated (see the package documentation for the guarantee). Frames:
//
//	id: <task_id>:<version>
//	event: task.state.changed
//	data: {"event_id":...,"task_id":...,"tenant_id":...,"from":...,"to":...,"version":...,"progress":...,"error_code":...,"at":...}
//
// A render's changes come on the same stream, with render_id instead of
// task_id (and the render's id in the frame's id).
//
// plus a comment line every heartbeat so proxies keep the connection open.
// A Last-Event-ID header changes nothing: there is no replay.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, p tenant.Principal) *apiError {
	ctx := r.Context()
	wctx, cancel := context.WithTimeout(ctx, streamOpenWait)
	sub, err := s.hub.subscribe(wctx, p.TenantID)
	cancel()
	switch {
	case errors.Is(err, errTooManyStreams):
		return errorf(http.StatusTooManyRequests, CodeTooManyStreams,
			"this tenant already has %d event streams open; close one, or share one stream between your clients", maxStreamsPerTenant)
	case err != nil:
		e := errorf(http.StatusServiceUnavailable, CodeEventStreamUnavailable, "live events are unavailable for a moment; retry in a few seconds")
		e.Header = http.Header{"Retry-After": {"5"}}
		return e
	}
	defer s.hub.unsubscribe(sub)

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	// retry: tells EventSource how soon to reconnect after the stream ends.
	if !s.write(rc, w, []byte("retry: 2000\n: connected\n\n")) {
		return nil
	}
	beat := time.NewTicker(s.heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case f, ok := <-sub.ch:
			if !ok {
				// The hub dropped the stream; say why in a comment, which
				// EventSource ignores but a person debugging can read.
				s.write(rc, w, []byte(": closed: "+sub.reason+"; reconnect and read your tasks to catch up\n\n"))
				return nil
			}
			if !s.write(rc, w, f) {
				return nil
			}
		case <-beat.C:
			if !s.write(rc, w, []byte(": heartbeat\n\n")) {
				return nil
			}
		}
	}
}

// write sends b and flushes it within streamWriteTimeout; false when the
// client is gone.
func (s *Server) write(rc *http.ResponseController, w io.Writer, b []byte) bool {
	_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	if _, err := w.Write(b); err != nil {
		return false
	}
	return rc.Flush() == nil
}
