package stage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/task"
)

// eventAbout is an event about task id of tenant.
func eventAbout(t *testing.T, tenantID, id uuid.UUID) envelope.Envelope {
	t.Helper()
	ev, err := envelope.New(envelope.NewParams{EventType: catalog.EventFetchRequested, Producer: "test",
		AggregateType: task.AggregateType, AggregateID: id.String(), TenantID: tenantID.String(),
		Payload: task.FetchRequested{TaskID: id}})
	require.NoError(t, err)
	return ev
}

func TestReadTask(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	tk := stagetest.NewTask(t, pool, nil)

	got, err := stage.ReadTask(t.Context(), pool, eventAbout(t, tk.TenantID, tk.ID), tk.ID)
	require.NoError(t, err)
	require.Equal(t, tk.ID, got.ID)

	missing := uuid.New()
	_, err = stage.ReadTask(t.Context(), pool, eventAbout(t, tk.TenantID, missing), missing)
	class, code := outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "task.not_found", code)
	require.EqualError(t, err, "task "+missing.String()+" does not exist")

	_, err = stage.ReadTask(t.Context(), pool, eventAbout(t, uuid.New(), tk.ID), tk.ID)
	class, code = outcome.Of(err)
	require.Equal(t, outcome.ClassPermanent, class)
	require.Equal(t, "security.tenant_mismatch", code)
}

func TestDoLocked(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	const consumer = "cg.test.v1"
	tk := stagetest.NewTask(t, pool, nil, task.Transition{To: task.Submitting})
	do := func(ev envelope.Envelope, status task.Status, fnErr error) (ran bool, err error) {
		err = stage.DoLocked(t.Context(), pool, consumer, ev, tk.ID, status, func(_ context.Context, _ pgx.Tx, cur task.Task) error {
			ran = true
			require.Equal(t, tk.ID, cur.ID)
			return fnErr
		})
		return ran, err
	}

	stale := eventAbout(t, tk.TenantID, tk.ID)
	ran, err := do(stale, task.Fetching, nil)
	require.NoError(t, err)
	require.False(t, ran, "a task that left the status is not touched")
	require.Equal(t, string(inbox.StaleNoop), stagetest.InboxResult(t, pool, consumer, stale.EventID))

	failing := eventAbout(t, tk.TenantID, tk.ID)
	boom := errors.New("boom")
	ran, err = do(failing, task.Submitting, boom)
	require.ErrorIs(t, err, boom)
	require.True(t, ran)
	require.Empty(t, stagetest.InboxResult(t, pool, consumer, failing.EventID), "a failed function records nothing")

	applied := eventAbout(t, tk.TenantID, tk.ID)
	ran, err = do(applied, task.Submitting, nil)
	require.NoError(t, err)
	require.True(t, ran)
	require.Equal(t, string(inbox.Applied), stagetest.InboxResult(t, pool, consumer, applied.EventID))
}
