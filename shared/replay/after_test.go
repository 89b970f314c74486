package replay_test

import (
	"crypto/sha256"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/billing"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// TestReplayRecordsItsAfterSnapshot: once the consumer commits a replay
// event, the replay gets its after-snapshot (the task's state and side
// effects then, and what the inbox recorded), beside the plan's before;
// not earlier, and once.
func TestReplayRecordsItsAfterSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tk, _ := b.taskAt(t, b.tenant(t), task.Succeeded)
	settle := event(t, tk, catalog.EventSettleRequested, task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded})
	b.quarantine(t, deadLetter(t, catalog.GroupSettle, settle))
	plan, err := b.desk.Plan(ctx, replay.Ref{ID: uuid.MustParse(settle.EventID)}, "alice")
	require.NoError(t, err)
	require.Equal(t, billing.Held, plan.Effects.Reservation.Status, "before: the credits are held")
	_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
	require.NoError(t, err)
	x, err := b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.NoError(t, err)

	n, err := b.desk.RecordOutcomes(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "not applied yet: nothing to record")
	got, err := b.desk.Get(ctx, plan.ReplayID)
	require.NoError(t, err)
	require.Nil(t, got.After)

	// The settle stage applies the replay: it captures the reservation and
	// commits the replay event's inbox row in the same transaction.
	_, err = b.pool.Exec(ctx, `UPDATE credit_reservations SET status = 'CAPTURED', settled_at = now() WHERE task_id = $1`, tk.ID)
	require.NoError(t, err)
	hash := sha256.Sum256(settle.Payload)
	_, err = b.pool.Exec(ctx, `INSERT INTO inbox_dedup (consumer_name, event_id, result_code, payload_hash) VALUES ($1, $2, 'APPLIED', $3)`,
		catalog.GroupSettle.Name, x.ReplayEventID, hash[:])
	require.NoError(t, err)

	n, err = b.desk.RecordOutcomes(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	got, err = b.desk.Get(ctx, plan.ReplayID)
	require.NoError(t, err)
	require.NotNil(t, got.After)
	require.Equal(t, "APPLIED", got.After.Result)
	require.NotNil(t, got.After.Task)
	require.Equal(t, string(task.Succeeded), got.After.Task.Status)
	require.Equal(t, billing.Captured, got.After.Effects.Reservation.Status, "after: captured")
	require.Equal(t, billing.Held, got.Plan.Effects.Reservation.Status, "the before is kept beside it")
	require.False(t, got.After.AppliedAt.IsZero())

	n, err = b.desk.RecordOutcomes(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "recorded once")
}

// TestDiscardIsAnAuditedWayOut: a discard needs a ticket, closes the
// message and its copies, and a replay approved before it is refused when
// executed; a message that is not open cannot be discarded.
func TestDiscardIsAnAuditedWayOut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tk, _ := b.taskAt(t, b.tenant(t), task.Succeeded)
	settle := event(t, tk, catalog.EventSettleRequested, task.SettleRequested{TaskID: tk.ID, Status: task.Succeeded})
	ids := b.quarantine(t, deadLetter(t, catalog.GroupSettle, settle), reused(entry(t, catalog.GroupSettle, settle, "payload.invalid")))
	plan, err := b.desk.Plan(ctx, replay.Ref{ID: ids[0]}, "alice")
	require.NoError(t, err)
	_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
	require.NoError(t, err)

	_, err = b.desk.Discard(ctx, ids[0], replay.Decision{Operator: "bob", Reason: "test traffic"})
	require.ErrorIs(t, err, replay.ErrInvalid, "no ticket, no discard")
	d, err := b.desk.Discard(ctx, ids[0], replay.Decision{Ticket: "OPS-9", Operator: "bob", Reason: "test traffic from the load test"})
	require.NoError(t, err)
	require.EqualValues(t, 2, d.Rows, "the message and its copy")
	require.Equal(t, "OPS-9", d.Discard.Ticket)
	require.Equal(t, 2, b.count(t, `SELECT count(*) FROM message_quarantine WHERE status = 'DISCARDED' AND discard_ticket = 'OPS-9' AND discarded_by = 'bob'`))

	_, err = b.desk.Execute(ctx, plan.ReplayID, "carol")
	require.ErrorIs(t, err, replay.ErrRefused, "the approval came before the discard")
	require.Empty(t, b.replays(t, settle.EventID), "nothing was sent")

	_, err = b.desk.Discard(ctx, ids[1], replay.Decision{Ticket: "OPS-9", Operator: "bob", Reason: "again"})
	require.ErrorIs(t, err, replay.ErrNotOpen)
	_, err = b.desk.Discard(ctx, uuid.New(), replay.Decision{Ticket: "OPS-9", Operator: "bob", Reason: "x"})
	require.ErrorIs(t, err, replay.ErrNotFound)

	shown, err := b.desk.Show(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, quarantine.Discarded, shown.Status)
	require.NotNil(t, shown.Discard)
	require.Equal(t, "test traffic from the load test", shown.Discard.Reason)
}
