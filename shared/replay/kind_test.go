package replay

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/aggregate/aggregatetest"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/quarantine"
)

func TestKindConforms(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	aggregatetest.Exercise(t, aggregatetest.Harness[uuid.UUID, Status, Replay]{
		Kind: Kind,
		Pool: pool,
		Create: func(t *testing.T, s Status) uuid.UUID {
			// Put straight into s with the columns s requires, as no desk
			// would: the suite needs a row in every status.
			id := uuid.Must(uuid.NewV7())
			_, err := pool.Exec(t.Context(), `INSERT INTO message_replays (replay_id, original_event_id, consumer_name, topic, ticket, operator, reason,
					status, dry_run_report, approved_at, executed_at, replay_event_id)
				VALUES ($1, $2, 'cg.conformance', 'topic', 'T-1', 'conformance', 'conformance', $3, '{}',
					CASE WHEN $3 IN ($4, $5) THEN now() END, CASE WHEN $3 = $5 THEN now() END, CASE WHEN $3 = $5 THEN gen_random_uuid() END)`,
				id, uuid.New(), s, StatusApproved, StatusExecuted)
			require.NoError(t, err)
			return id
		},
		Move: func(ctx context.Context, tx pgx.Tx, cur Replay, to Status) error {
			ch := change{step: Step{Step: "conformance", At: time.Now().UTC(), Operator: "conformance"}}
			if to == StatusExecuted {
				ev := uuid.New()
				ch.event = &ev
			}
			return move(ctx, tx, cur, to, ch)
		},
	})
}

func TestMoveRefusesAMoveNotInTheTable(t *testing.T) {
	t.Parallel()
	n := 0
	for _, from := range Kind.States {
		for _, to := range Kind.States {
			if Legal(from, to) {
				continue
			}
			n++
			// Refused before the database is touched: no transaction needed.
			err := move(t.Context(), nil, Replay{ReplayID: uuid.New(), Status: from}, to, change{})
			require.ErrorIs(t, err, aggregate.ErrIllegalMove, "%s -> %s", from, to)
		}
	}
	require.NotZero(t, n)
}

// TestRowsAreBornDryRun: a row is written new only as a dry run, whether
// a dry run or a bulk approval records it; a decision is a move from it.
func TestRowsAreBornDryRun(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)
	for _, bulk := range []*quarantine.Filter{nil, {Consumer: "cg.conformance"}} {
		in := inspection{now: time.Now().UTC(), report: Report{Status: StatusDryRun,
			Message: quarantine.Message{QuarantineID: uuid.New(), Consumer: "cg.conformance", Topic: "topic"}}}
		var cur Replay
		require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			var err error
			cur, err = record(t.Context(), tx, &in, "conformance", bulk)
			return err
		}))
		got, err := readReplay(t.Context(), pool, cur.ReplayID, false)
		require.NoError(t, err)
		require.Equal(t, StatusDryRun, got.Status)
		require.Equal(t, Replay{ReplayID: got.ReplayID, Status: got.Status}, cur)
		require.Equal(t, NoTicket, got.Ticket)
		require.Equal(t, in.report.ReplayID, got.ReplayID)
		require.Len(t, got.Steps, 1)
		require.Equal(t, StepPlanned, got.Steps[0].Step)
		require.Equal(t, bulk != nil, got.Steps[0].Bulk)
	}
}
