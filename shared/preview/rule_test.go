package preview_test

import (
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/task"
)

func fetchEvent(t *testing.T, payload any) envelope.Envelope {
	t.Helper()
	id := uuid.NewString()
	e, err := envelope.New(envelope.NewParams{
		EventType: catalog.EventFetchRequested, Producer: "test", AggregateType: task.AggregateType,
		AggregateID: id, TenantID: uuid.NewString(), Payload: payload,
	})
	require.NoError(t, err)
	return e
}

// A rule decodes the payload as the stage would, names its task, and
// decides from the state; a refusal ends the plan with its own verdict.
func TestRuleOf(t *testing.T) {
	t.Parallel()
	decide := func(s preview.State, p task.FetchRequested) preview.Verdict {
		if task.FetchActs(s.Task) {
			return preview.Act.Because("fetch.store", "the task is %s", preview.At(s.Task))
		}
		return preview.StaleNoop.Because("fetch.stale", "the task is %s", preview.At(s.Task))
	}
	rule := preview.RuleOf(catalog.EventFetchRequested, preview.PayloadTask, decide)
	require.Equal(t, catalog.EventFetchRequested, rule.EventType())

	id := uuid.New()
	target, refused := rule.Parse(fetchEvent(t, task.FetchRequested{TaskID: id}))
	require.Nil(t, refused)
	require.Equal(t, id, target.TaskID)
	v := target.Decide(preview.State{Task: task.Task{Status: task.Fetching, Version: 5}})
	require.Equal(t, preview.Verdict{Action: preview.Act, Code: "fetch.store", Reason: "the task is FETCHING (v5)"}, v)
	require.Equal(t, preview.StaleNoop, target.Decide(preview.State{Task: task.Task{Status: task.Succeeded}}).Action)

	_, refused = rule.Parse(fetchEvent(t, map[string]any{"task_id": 42}))
	require.NotNil(t, refused)
	require.Equal(t, preview.Refuse, refused.Action)
	require.Equal(t, "payload.invalid", refused.Code)

	picky := preview.RuleOf(catalog.EventFetchRequested,
		func(envelope.Envelope, task.FetchRequested) (uuid.UUID, error) {
			return uuid.Nil, preview.Refusal("fetch.never", "never for %s", "this")
		}, decide)
	_, refused = picky.Parse(fetchEvent(t, task.FetchRequested{TaskID: id}))
	require.Equal(t, &preview.Verdict{Action: preview.Refuse, Code: "fetch.never", Reason: "never for this"}, refused)

	broken := preview.RuleOf(catalog.EventFetchRequested,
		func(envelope.Envelope, task.FetchRequested) (uuid.UUID, error) {
			return uuid.Nil, errors.New("no task")
		}, decide)
	_, refused = broken.Parse(fetchEvent(t, task.FetchRequested{TaskID: id}))
	require.Equal(t, "payload.invalid", refused.Code, "an error that is no refusal still refuses")
}

func TestEffectsAsset(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	e := preview.Effects{Assets: []preview.Asset{{AssetID: id, Kind: "SOURCE"}}}
	a, ok := e.Asset(id)
	require.True(t, ok)
	require.Equal(t, "SOURCE", a.Kind)
	_, ok = e.Asset(uuid.New())
	require.False(t, ok)
}
