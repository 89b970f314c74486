package stage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
)

func postEvent(t *testing.T, url, id string) int {
	t.Helper()
	ev := event.New()
	ev.SetID(id)
	ev.SetSource("/test")
	ev.SetType("test.event")
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(t.Context(), binding.ToMessage(&ev), req))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// TestHTTPHandlerAnswersConcurrentRequests: every one of many concurrent
// requests is handled with its own event and answered at once.
func TestHTTPHandlerAnswersConcurrentRequests(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(stage.HTTPHandler(func(_ context.Context, ev event.Event) (*event.Event, error) {
		time.Sleep(time.Millisecond)
		mu.Lock()
		seen[ev.ID()]++
		mu.Unlock()
		return nil, nil
	}))
	t.Cleanup(srv.Close)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			require.Equal(t, http.StatusOK, postEvent(t, srv.URL, fmt.Sprint("ev-", i)))
		})
	}
	wg.Wait()
	require.Len(t, seen, 200)
	for id, n := range seen {
		require.Equal(t, 1, n, id)
	}
}

func TestHTTPHandlerMapsResults(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(stage.HTTPHandler(func(_ context.Context, ev event.Event) (*event.Event, error) {
		switch ev.ID() {
		case "permanent":
			return nil, cehttp.NewResult(http.StatusUnprocessableEntity, "no")
		case "plain":
			return nil, context.DeadlineExceeded
		}
		return nil, nil
	}))
	t.Cleanup(srv.Close)
	require.Equal(t, http.StatusOK, postEvent(t, srv.URL, "ok"))
	require.Equal(t, http.StatusUnprocessableEntity, postEvent(t, srv.URL, "permanent"))
	require.Equal(t, http.StatusInternalServerError, postEvent(t, srv.URL, "plain"))

	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{"hello":"world"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "a body that is not a CloudEvent")
	resp, err = http.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestHTTPHandlerAnswersWithTheStageCode: a failure's class, code and
// message travel in the answer's body, for the adapter to read back.
func TestHTTPHandlerAnswersWithTheStageCode(t *testing.T) {
	t.Parallel()
	fn := stage.New(stage.Params{Name: "test", EventTypes: []string{"test.happened"},
		Work: func(context.Context, envelope.Envelope) error {
			return outcome.Permanentf("security.tenant_mismatch", "not yours")
		}})
	srv := httptest.NewServer(stage.HTTPHandler(fn.Handle))
	t.Cleanup(srv.Close)
	env, err := envelope.New(envelope.NewParams{EventType: "test.happened", Producer: "test", AggregateType: "generation_task",
		AggregateID: uuid.NewString(), TenantID: uuid.NewString(), Payload: map[string]any{}})
	require.NoError(t, err)
	ev, err := env.ToCloudEvent()
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL, nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(t.Context(), binding.ToMessage(&ev), req))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)
	require.Equal(t, outcome.ContentType, resp.Header.Get("Content-Type"))
	var body outcome.Body
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, outcome.BodyError{Class: outcome.ClassPermanent, Code: "security.tenant_mismatch", Message: "not yours"}, body.Error)
}
