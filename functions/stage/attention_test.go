package stage_test

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/task"
)

// TestEscalate: an uncurable failure hands a running task to a person
// (NEEDS_ATTENTION with the failure's code and message, the event
// applied); a task that is terminal already, NEEDS_ATTENTION included, is
// left as it is and the event is a stale no-op; any other error is
// returned unchanged.
func TestEscalate(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	missing := stage.Uncurable("media.source_missing", errors.New("the source is gone"))
	escalate := func(tk task.Task, cause error) (result string, err error) {
		ev := eventAbout(t, tk.TenantID, tk.ID)
		err = stage.Escalate(t.Context(), pool, lockedConsumer, ev, task.Origin{Producer: "test"}, tk.ID, cause, slog.New(slog.DiscardHandler))
		return stagetest.InboxResult(t, pool, lockedConsumer, ev.EventID), err
	}

	running := stagetest.NewTask(t, pool, nil, task.Transition{To: task.Submitting})
	result, err := escalate(running, missing)
	require.NoError(t, err)
	require.Equal(t, string(inbox.Applied), result)
	got, err := task.Get(t.Context(), pool, running.ID)
	require.NoError(t, err)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "media.source_missing", got.ErrorCode)
	require.Equal(t, missing.Error(), got.ErrorMessage)

	canceled := stagetest.NewTask(t, pool, nil, task.Transition{To: task.Canceled})
	for _, ended := range []task.Task{got, canceled} {
		result, err := escalate(ended, missing)
		require.NoError(t, err, "%s", ended.Status)
		require.Equal(t, string(inbox.StaleNoop), result, "%s", ended.Status)
		after, err := task.Get(t.Context(), pool, ended.ID)
		require.NoError(t, err)
		require.Equal(t, [2]any{ended.Status, ended.Version}, [2]any{after.Status, after.Version}, "a terminal task is left as it is")
	}

	other := errors.New("the database went away")
	result, err = escalate(stagetest.NewTask(t, pool, nil), other)
	require.ErrorIs(t, err, other)
	require.Empty(t, result, "an error that a retry may cure escalates nothing")
}
