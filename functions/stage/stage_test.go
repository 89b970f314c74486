package stage_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"
	fcloudevents "knative.dev/func-go/cloudevents"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outcome"
)

type testBundle struct {
	server *httptest.Server
	mu     sync.Mutex
	seen   []envelope.Envelope
	result error
}

// setup serves a stage through func-go's own CloudEvents service handler,
// exactly as a deployed function is served.
func setup(t *testing.T, result error) *testBundle {
	t.Helper()
	b := &testBundle{result: result}
	f := stage.New(stage.Params{
		Name:       "submit",
		EventTypes: []string{"generation.submit.requested"},
		Work: func(ctx context.Context, ev envelope.Envelope) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.seen = append(b.seen, ev)
			return b.result
		},
	})
	b.server = httptest.NewServer(fcloudevents.New(f).Handler)
	t.Cleanup(b.server.Close)
	return b
}

func validEnvelope(t *testing.T) envelope.Envelope {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{
		EventType:     "generation.submit.requested",
		Producer:      "api",
		AggregateType: "generation_task",
		AggregateID:   "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f",
		TenantID:      "0193a5e0-0000-7000-8000-000000000001",
		Payload:       map[string]any{"task_id": "0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f", "version": 1},
	})
	require.NoError(t, err)
	return env
}

// post sends ev in binary (or structured) mode and returns status and body.
func (b *testBundle) post(t *testing.T, ev event.Event, structured bool) (int, string) {
	t.Helper()
	ctx := context.Background()
	if structured {
		ctx = binding.WithForceStructured(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.server.URL, nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestHandleValidEvent(t *testing.T) {
	t.Parallel()
	for _, structured := range []bool{false, true} {
		b := setup(t, nil)
		env := validEnvelope(t)
		ev, err := env.ToCloudEvent()
		require.NoError(t, err)
		status, _ := b.post(t, ev, structured)
		require.Equal(t, http.StatusOK, status, "structured=%v", structured)
		require.Equal(t, []envelope.Envelope{env}, b.seen)
	}
}

func TestHandleRefusesWithClearStatus(t *testing.T) {
	t.Parallel()
	valid := func(t *testing.T) event.Event {
		ev, err := validEnvelope(t).ToCloudEvent()
		require.NoError(t, err)
		return ev
	}
	tests := []struct {
		name       string
		event      func(t *testing.T) event.Event
		workResult error
		wantStatus int
		worked     bool
	}{
		{"tenant missing", func(t *testing.T) event.Event {
			ev := valid(t)
			ev.SetExtension("tenantid", nil)
			return ev
		}, nil, http.StatusBadRequest, false},
		{"unsupported schema version", func(t *testing.T) event.Event {
			ev := valid(t)
			ev.SetExtension("schemaversion", 99)
			return ev
		}, nil, http.StatusBadRequest, false},
		{"bad event id", func(t *testing.T) event.Event {
			ev := valid(t)
			ev.SetID("not-a-uuid")
			return ev
		}, nil, http.StatusBadRequest, false},
		{"event type of another stage", func(t *testing.T) event.Event {
			ev := valid(t)
			ev.SetType("billing.settle.requested")
			return ev
		}, nil, http.StatusUnprocessableEntity, false},
		{"permanent work failure", valid, outcome.Permanentf("tenant.mismatch", "task belongs to another tenant"), http.StatusUnprocessableEntity, true},
		{"retryable work failure", valid, errors.New("database unavailable"), http.StatusInternalServerError, true},
		{"work timeout", valid, context.DeadlineExceeded, http.StatusServiceUnavailable, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, tt.workResult)
			status, body := b.post(t, tt.event(t), false)
			require.Equal(t, tt.wantStatus, status, body)
			require.Equal(t, tt.worked, len(b.seen) == 1)
		})
	}
}

func TestHandleRefusesWhatIsNotACloudEvent(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	body, err := json.Marshal(map[string]any{"hello": "world"})
	require.NoError(t, err)
	resp, err := http.Post(b.server.URL, "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.GreaterOrEqual(t, resp.StatusCode, 400)
	require.Less(t, resp.StatusCode, 500, "a request that is no CloudEvent is the caller's mistake")
	require.Empty(t, b.seen)
}
