package stage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/aggregate"
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

// lockedStage is a typed fetch stage whose work runs fnErr in a locked
// step on status and adds an after-commit hook inside and one outside it.
func lockedStage(pool *pgxpool.Pool, status task.Status, fnErr error, ran, inside, outside *int) *stage.Function {
	return stage.NewTyped(stage.Typed[task.FetchRequested]{Group: lockedGroup, DB: pool,
		Work: func(ctx context.Context, d stage.Delivery[task.FetchRequested]) error {
			d.AfterCommit(func(context.Context) { *outside++ })
			return d.Locked(ctx, status, func(_ context.Context, _ pgx.Tx, cur task.Task) error {
				*ran++
				d.AfterCommit(func(context.Context) { *inside++ })
				if cur.ID != d.Task.ID {
					return errors.New("locked another task")
				}
				return fnErr
			})
		}})
}

// lockedGroup is a consumer group of the fetch event, for a test stage.
var lockedGroup = catalog.Group{Name: lockedConsumer, Stage: "fetch"}

const lockedConsumer = "cg.test.v1"

// TestDeliveryLocked: the locked step runs only while the task is in its
// status, records the inbox result, and its after-commit hooks run once,
// only for work that committed (not for a stale no-op, a rollback or a
// duplicate); a delayed event whose wait no longer holds never reaches
// the work.
func TestDeliveryLocked(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	tk := stagetest.NewTask(t, pool, nil, task.Transition{To: task.Submitting})
	deliver := func(status task.Status, fnErr error, payload task.FetchRequested) (ran, inside, outside int, eventID string, err error) {
		eventID = uuid.NewString()
		f := lockedStage(pool, status, fnErr, &ran, &inside, &outside)
		_, err = f.Handle(t.Context(), stagetest.CloudEvent(t, tk, eventID, catalog.EventFetchRequested, payload))
		return ran, inside, outside, eventID, err
	}
	about := task.FetchRequested{TaskID: tk.ID}

	ran, inside, outside, id, err := deliver(task.Fetching, nil, about)
	require.NoError(t, err)
	require.Equal(t, [3]int{0, 0, 1}, [3]int{ran, inside, outside}, "a task that left the status is not touched; the work's own hook runs")
	require.Equal(t, string(inbox.StaleNoop), stagetest.InboxResult(t, pool, lockedConsumer, id))

	boom := outcome.Permanentf("test.boom", "boom")
	ran, inside, outside, id, err = deliver(task.Submitting, boom, about)
	require.Error(t, err)
	require.Equal(t, [3]int{1, 0, 0}, [3]int{ran, inside, outside}, "a failed step runs no hook")
	require.Empty(t, stagetest.InboxResult(t, pool, lockedConsumer, id), "a failed step records nothing")

	ran, inside, outside, id, err = deliver(task.Submitting, nil, about)
	require.NoError(t, err)
	require.Equal(t, [3]int{1, 1, 1}, [3]int{ran, inside, outside})
	require.Equal(t, string(inbox.Applied), stagetest.InboxResult(t, pool, lockedConsumer, id))

	var dupRan, dupInside, dupOutside int
	f := lockedStage(pool, task.Submitting, nil, &dupRan, &dupInside, &dupOutside)
	_, err = f.Handle(t.Context(), stagetest.CloudEvent(t, tk, id, catalog.EventFetchRequested, about))
	require.NoError(t, err)
	require.Zero(t, dupInside, "a duplicate delivery commits nothing new and runs no locked hook")

	overtaken := about
	overtaken.Wait = task.Wait{ExpectedStatus: task.Submitting, ExpectedVersion: tk.Version + 5, Reason: "test"}
	ran, _, outside, id, err = deliver(task.Submitting, nil, overtaken)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 0}, [2]int{ran, outside}, "a wait that no longer holds never reaches the work")
	require.Equal(t, string(inbox.StaleNoop), stagetest.InboxResult(t, pool, lockedConsumer, id))

	holding := about
	holding.Wait = task.Wait{ExpectedStatus: task.Submitting, ExpectedVersion: tk.Version, Reason: "test"}
	ran, _, _, _, err = deliver(task.Submitting, nil, holding)
	require.NoError(t, err)
	require.Equal(t, 1, ran, "a wait that holds is work")
}

// TestDeliveryApply: a transition whose predicate does not hold on the
// task as locked, or whose work answers stale, is a recorded stale no-op
// whose after-commit hooks do not run; a move the task's table does not
// have is refused and records nothing.
func TestDeliveryApply(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	tk := stagetest.NewTask(t, pool, nil, task.Transition{To: task.Submitting})
	deliver := func(tr aggregate.Transition[task.Status, task.Task], answer aggregate.Result) (ran, hooks int, eventID string, err error) {
		eventID = uuid.NewString()
		f := stage.NewTyped(stage.Typed[task.FetchRequested]{Group: lockedGroup, DB: pool,
			Work: func(ctx context.Context, d stage.Delivery[task.FetchRequested]) error {
				return d.Apply(ctx, tr, func(_ context.Context, _ pgx.Tx, cur task.Task) (aggregate.Result, error) {
					ran++
					d.AfterCommit(func(context.Context) { hooks++ })
					return answer, nil
				})
			}})
		_, err = f.Handle(t.Context(), stagetest.CloudEvent(t, tk, eventID, catalog.EventFetchRequested, task.FetchRequested{TaskID: tk.ID}))
		return ran, hooks, eventID, err
	}

	ran, hooks, id, err := deliver(aggregate.Transition[task.Status, task.Task]{If: func(cur task.Task) bool { return cur.ProviderJobID == "other" }}, aggregate.Applied)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 0}, [2]int{ran, hooks}, "a predicate that does not hold keeps the work from running")
	require.Equal(t, string(inbox.StaleNoop), stagetest.InboxResult(t, pool, lockedConsumer, id))

	ran, hooks, id, err = deliver(task.Guard(task.Submitting), aggregate.Stale)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{ran, hooks}, "work that answers stale runs no hook")
	require.Equal(t, string(inbox.StaleNoop), stagetest.InboxResult(t, pool, lockedConsumer, id))

	illegal := task.Guard(task.Submitting)
	illegal.To = task.Succeeded
	ran, _, id, err = deliver(illegal, aggregate.Applied)
	require.ErrorIs(t, err, aggregate.ErrIllegalMove)
	require.Zero(t, ran, "a refused move does not run its work")
	require.Empty(t, stagetest.InboxResult(t, pool, lockedConsumer, id), "a refused move records nothing")

	ran, hooks, id, err = deliver(task.Guard(task.Submitting), aggregate.Applied)
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 1}, [2]int{ran, hooks})
	require.Equal(t, string(inbox.Applied), stagetest.InboxResult(t, pool, lockedConsumer, id))
}
