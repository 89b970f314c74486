package replay_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// TestEveryMoveMadeIsInTheTable runs every way a replay changes status
// (an approval, a refusal at approval, an execution, a refusal at
// execution, a bulk approval and refusal) and reads back the statuses
// each row went through: every move made is in the table, and every move
// of the table is made by one of them.
func TestEveryMoveMadeIsInTheTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner, other := b.tenant(t), b.tenant(t)
	plan := func(e quarantine.Entry) replay.Report {
		t.Helper()
		p, err := b.desk.Plan(ctx, replay.Ref{ID: b.quarantine(t, e)[0]}, "alice")
		require.NoError(t, err)
		return p
	}

	// Approved, then executed.
	_, submit := b.taskAt(t, owner, task.Queued)
	p := plan(entry(t, catalog.GroupSubmit, submit, "provider.unavailable"))
	_, err := b.desk.Approve(ctx, p.ReplayID, approval)
	require.NoError(t, err)
	_, err = b.desk.Execute(ctx, p.ReplayID, "carol")
	require.NoError(t, err)

	// Refused at approval: an event naming another tenant.
	tk, _ := b.taskAt(t, owner, task.Queued)
	forged := event(t, tk, catalog.EventSubmitRequested, task.SubmitRequested{TaskID: tk.ID, Version: 1})
	forged.TenantID = other.String()
	p = plan(entry(t, catalog.GroupSubmit, forged, "security.tenant_mismatch"))
	_, err = b.desk.Approve(ctx, p.ReplayID, approval)
	require.ErrorIs(t, err, replay.ErrRefused)

	// Refused at execution: the message went away after the approval.
	_, submit = b.taskAt(t, owner, task.Queued)
	p = plan(entry(t, catalog.GroupSubmit, submit, "provider.unavailable"))
	_, err = b.desk.Approve(ctx, p.ReplayID, approval)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `DELETE FROM message_quarantine WHERE quarantine_id = $1`, p.Message.QuarantineID)
	require.NoError(t, err)
	_, err = b.desk.Execute(ctx, p.ReplayID, "carol")
	require.ErrorIs(t, err, replay.ErrRefused)

	// A bulk approval: the forged message again (refused), and a new one.
	_, submit = b.taskAt(t, owner, task.Queued)
	b.quarantine(t, entry(t, catalog.GroupSubmit, submit, "provider.unavailable"))
	bulk, err := b.desk.ApproveBulk(ctx, quarantine.Filter{Consumer: catalog.GroupSubmit.Name}, replay.Decision{Ticket: "OPS-43", Operator: "bob", Reason: "bulk"}, 0)
	require.NoError(t, err)
	require.Equal(t, 1, bulk.Approved)
	require.Equal(t, 1, bulk.Rejected)

	// The status each step leaves a replay in.
	after := map[string]replay.Status{
		replay.StepPlanned: replay.StatusDryRun, replay.StepApproved: replay.StatusApproved,
		replay.StepExecuted: replay.StatusExecuted, replay.StepRefused: replay.StatusRejected,
	}
	rows, err := b.pool.Query(ctx, `SELECT replay_id FROM message_replays`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	made := map[[2]replay.Status]bool{}
	for _, id := range ids {
		r, err := b.desk.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, replay.StepPlanned, r.Steps[0].Step, "a replay starts as a plan")
		from := replay.StatusDryRun
		for _, s := range r.Steps[1:] {
			to, ok := after[s.Step]
			require.True(t, ok, "step %q", s.Step)
			require.True(t, replay.Legal(from, to), "replay %s moved %s -> %s, which the table does not have", id, from, to)
			made[[2]replay.Status{from, to}] = true
			from = to
		}
		require.Equal(t, from, r.Status, "replay %s: its status is where its steps lead", id)
	}
	for _, from := range replay.Kind.States {
		for _, to := range replay.Kind.Moves[from] {
			require.True(t, made[[2]replay.Status{from, to}], "the table has %s -> %s, which no way of the desk makes", from, to)
		}
	}
}
