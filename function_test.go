package function

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v2"
	fcloudevents "knative.dev/func-go/cloudevents"
	fn "knative.dev/func/pkg/functions"
)

// TestFuncYAMLLoadsWithKnativeFunc reads func.yaml with the func CLI's own
// package, so the manifest is one the real CLI accepts.
func TestFuncYAMLLoadsWithKnativeFunc(t *testing.T) {
	t.Parallel()
	f, err := fn.NewFunction(".")
	require.NoError(t, err)
	require.True(t, f.Initialized(), "func.yaml was not found or has no created time, which the CLI requires")
	require.NoError(t, f.Validate())
	require.Equal(t, "go", f.Runtime)
	require.Equal(t, "cloudevent", f.Invoke)
	require.Equal(t, fn.LastSpecVersion(), f.SpecVersion, "func.yaml would need migrating")

	// NewFunction ignores unknown keys; a strict decode catches a misspelt one.
	raw, err := os.ReadFile(fn.FunctionFile)
	require.NoError(t, err)
	var strict fn.Function
	require.NoError(t, yaml.UnmarshalStrict(raw, &strict))
}

func TestStartNeedsAKnownStage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.ErrorContains(t, New().Start(ctx, map[string]string{}), "STAGE is not set")
	require.ErrorContains(t, New().Start(ctx, map[string]string{"STAGE": "nope"}), `unknown stage "nope": set STAGE to one of submit, poll`)
}

// TestHandleBeforeStartIsRetryable: func-go runs Start while it already
// serves, so the first events can arrive before the stage exists.
func TestHandleBeforeStartIsRetryable(t *testing.T) {
	t.Parallel()
	server := httptest.NewServer(fcloudevents.New(New()).Handler)
	t.Cleanup(server.Close)

	ev := event.New()
	ev.SetID("0193a5e0-7c1e-7b3a-9d2f-3c4b5a6d7e8f")
	ev.SetSource("/aivedio/api")
	ev.SetType("generation.submit.requested")
	ctx := context.Background()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, server.URL, nil)
	require.NoError(t, err)
	require.NoError(t, cehttp.WriteRequest(ctx, binding.ToMessage(&ev), req))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)

	ready, err := New().Ready(ctx)
	require.NoError(t, err)
	require.False(t, ready)
}
