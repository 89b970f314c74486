package replay_test

import (
	encbin "encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/replay"
	"github.com/aivedio/pipeline/shared/task"
)

// v7At is a UUIDv7 made at at.
func v7At(t *testing.T, at time.Time) string {
	t.Helper()
	id, err := uuid.NewV7()
	require.NoError(t, err)
	var ms [8]byte
	encbin.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(id[:6], ms[2:])
	return id.String()
}

// TestReplayOutsideTheWindowIsRefused: an event older than the replay
// window is refused, whichever clue shows its age (the time in its UUIDv7
// id, its original outbox row, its quarantine row), with a reason that
// gives the window, the age and the danger; approving it fails with
// ErrOutsideWindow, the row becomes REJECTED, and nothing is sent. The
// same event with a longer window is replayed as usual.
func TestReplayOutsideTheWindowIsRefused(t *testing.T) {
	t.Parallel()
	eightDays := -8 * 24 * time.Hour
	tests := []struct {
		name string
		// age makes an event of the queued task's submit look 8 days old
		// one way, and returns the event to quarantine.
		age  func(t *testing.T, b *testBundle, submit envelope.Envelope) envelope.Envelope
		from string
	}{
		{"by its UUIDv7 id", func(t *testing.T, _ *testBundle, submit envelope.Envelope) envelope.Envelope {
			submit.EventID = v7At(t, time.Now().Add(eightDays))
			return submit
		}, replay.TimeFromEventID},
		{"by its outbox row", func(t *testing.T, b *testBundle, submit envelope.Envelope) envelope.Envelope {
			submit.EventID = uuid.NewString() // v4: no time in it
			require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
				return outbox.Write(t.Context(), tx, outbox.Event{Envelope: submit, Topic: catalog.GenerationSubmit})
			}))
			_, err := b.pool.Exec(t.Context(), `UPDATE outbox_events SET created_at = now() + $2 * interval '1 millisecond' WHERE event_id = $1`,
				submit.EventID, eightDays.Milliseconds())
			require.NoError(t, err)
			return submit
		}, replay.TimeFromOutbox},
		{"by its quarantine row", func(t *testing.T, _ *testBundle, submit envelope.Envelope) envelope.Envelope {
			submit.EventID = uuid.NewString()
			return submit
		}, replay.TimeFromQuarantine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			_, submit := b.taskAt(t, b.tenant(t), task.Queued)
			old := tt.age(t, b, submit)
			qid := b.quarantine(t, entry(t, catalog.GroupSubmit, old, "task.contended"))[0]
			_, err := b.pool.Exec(ctx, `UPDATE message_quarantine SET received_at = received_at + $2 * interval '1 millisecond'
				WHERE quarantine_id = $1 AND $3`, qid, eightDays.Milliseconds(), tt.from == replay.TimeFromQuarantine)
			require.NoError(t, err)

			longer := replay.NewDesk(b.pool, fakeRules, &replay.DeskOpts{ReplayWindow: 10 * 24 * time.Hour})
			within, err := longer.Plan(ctx, replay.Ref{ID: qid}, "alice")
			require.NoError(t, err)
			require.Equal(t, preview.Act, within.Verdict.Action, "inside a 10-day window: %s", within.Verdict.Reason)

			plan, err := b.desk.Plan(ctx, replay.Ref{ID: qid}, "alice")
			require.NoError(t, err)
			require.Equal(t, preview.Refuse, plan.Verdict.Action)
			require.Equal(t, replay.CodeOutsideWindow, plan.Verdict.Code)
			require.Equal(t, tt.from, plan.EventTimeFrom)
			require.WithinDuration(t, time.Now().Add(eightDays), plan.EventTime, time.Minute)
			require.Equal(t, 7*24*time.Hour, plan.ReplayWindow)
			for _, want := range []string{old.EventID, "8.0 days ago", "replay window of 7.0 days (REPLAY_WINDOW)",
				"inbox records of " + catalog.GroupSubmit.Name, "could apply it twice"} {
				require.Contains(t, plan.Verdict.Reason, want)
			}

			_, err = b.desk.Approve(ctx, plan.ReplayID, approval)
			require.ErrorIs(t, err, replay.ErrOutsideWindow)
			require.ErrorIs(t, err, replay.ErrRefused)
			require.Contains(t, err.Error(), "could apply it twice")
			got, err := b.desk.Get(ctx, plan.ReplayID)
			require.NoError(t, err)
			require.Equal(t, replay.StatusRejected, got.Status)
			_, err = b.desk.Execute(ctx, plan.ReplayID, "carol")
			require.ErrorIs(t, err, replay.ErrOutsideWindow)
			require.Empty(t, b.replays(t, old.EventID), "nothing is sent")
		})
	}
}
