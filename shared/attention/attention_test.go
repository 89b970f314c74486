package attention_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/attention"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/task"
)

var journey = config.Journey{PollFirst: 5 * time.Second, MaxWait: 30 * time.Minute}

// lostAtRunway is a task handed over NEEDS_ATTENTION reconcile.submit_unknown,
// its attempt's answer lost after one send.
func lostAtRunway(t *testing.T, pool *pgxpool.Pool) (task.Task, uuid.UUID) {
	t.Helper()
	return handedOver(t, pool, attention.SubmitUnknown, true)
}

// handedOver is a task handed over NEEDS_ATTENTION with code, its
// attempt's answer lost after one send if lost, with no attempt otherwise.
func handedOver(t *testing.T, pool *pgxpool.Pool, code string, lost bool) (task.Task, uuid.UUID) {
	t.Helper()
	msg := "provider runway offers no way to look its job up"
	cur := stagetest.NewTask(t, pool, nil,
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("runway")}},
		task.Transition{To: task.Reconciling},
		task.Transition{To: task.NeedsAttention, Set: task.Fields{ErrorCode: &code, ErrorMessage: &msg}})
	if !lost {
		return cur, uuid.Nil
	}
	var id uuid.UUID
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		a, err := attempt.Open(t.Context(), tx, cur.ID, "runway", "gen4.5")
		if err != nil {
			return err
		}
		id = a.ID
		if err := attempt.NoteSend(t.Context(), tx, a.ID); err != nil {
			return err
		}
		return attempt.Answer(t.Context(), tx, a.ID, attempt.SubmitUnknown, "", "provider.timeout", "no answer")
	}))
	return cur, id
}

func resolve(t *testing.T, pool *pgxpool.Pool, d attention.Decision) (attention.Resolution, error) {
	t.Helper()
	var r attention.Resolution
	err := pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		var err error
		r, err = attention.Resolve(t.Context(), tx, journey, d)
		return err
	})
	return r, err
}

func audit(t *testing.T, pool *pgxpool.Pool, taskID uuid.UUID) (decision, job, ticket, operator string, n int) {
	t.Helper()
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM task_resolutions WHERE task_id = $1`, taskID).Scan(&n))
	if n > 0 {
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT decision, coalesce(provider_job_id, ''), ticket, operator FROM task_resolutions WHERE task_id = $1`,
			taskID).Scan(&decision, &job, &ticket, &operator))
	}
	return decision, job, ticket, operator, n
}

// TestAPersonResolvesALostSubmit: the job a person found makes the task
// follow it (PROVIDER_RUNNING, a poll, the attempt ACCEPTED with the job);
// "no job" resubmits the attempt with the same key (SUBMITTING, a submit,
// every send counted refused); each is audited with its ticket and
// operator, and a task resolved once is not resolvable again.
func TestAPersonResolvesALostSubmit(t *testing.T) {
	t.Parallel()
	pool := dbtest.TestSchema(t)

	t.Run("the job found", func(t *testing.T) {
		cur, attemptID := lostAtRunway(t, pool)
		r, err := resolve(t, pool, attention.Decision{TaskID: cur.ID, JobID: "rw-job-7", Ticket: "OPS-9", Operator: "alice", Reason: "seen in Runway's console"})
		require.NoError(t, err)
		require.Equal(t, attemptID, r.AttemptID)
		got, err := task.Get(t.Context(), pool, cur.ID)
		require.NoError(t, err)
		require.Equal(t, task.ProviderRunning, got.Status)
		require.Equal(t, "rw-job-7", got.ProviderJobID)
		require.Empty(t, got.ErrorCode, "the task no longer says it needs attention")
		a, err := attempt.Get(t.Context(), pool, cur.ID, attemptID)
		require.NoError(t, err)
		require.Equal(t, attempt.Accepted, a.Status)
		require.Equal(t, "rw-job-7", a.ProviderJobID)
		var polls int
		for _, ev := range stagetest.StoredEvents(t, pool, catalog.EventPollDue) {
			var p task.PollDue
			require.NoError(t, json.Unmarshal(ev.Envelope.Payload, &p))
			if p.TaskID == cur.ID {
				polls++
				require.Equal(t, attemptID, p.AttemptID)
				require.Equal(t, attention.Producer, ev.Envelope.Producer)
			}
		}
		require.Equal(t, 1, polls)
		decision, job, ticket, operator, n := audit(t, pool, cur.ID)
		require.Equal(t, 1, n)
		require.Equal(t, []string{"JOB", "rw-job-7", "OPS-9", "alice"}, []string{decision, job, ticket, operator})

		_, err = resolve(t, pool, attention.Decision{TaskID: cur.ID, NoJob: true, Ticket: "OPS-9", Operator: "bob"})
		require.ErrorIs(t, err, attention.ErrNotResolvable, "resolved once")
		_, _, _, _, n = audit(t, pool, cur.ID)
		require.Equal(t, 1, n, "a refused decision leaves no audit row")
	})

	t.Run("no job", func(t *testing.T) {
		cur, attemptID := lostAtRunway(t, pool)
		_, err := resolve(t, pool, attention.Decision{TaskID: cur.ID, NoJob: true, Ticket: "OPS-10", Operator: "alice"})
		require.NoError(t, err)
		got, err := task.Get(t.Context(), pool, cur.ID)
		require.NoError(t, err)
		require.Equal(t, task.Submitting, got.Status)
		a, err := attempt.Get(t.Context(), pool, cur.ID, attemptID)
		require.NoError(t, err)
		require.Equal(t, attempt.Submitting, a.Status)
		require.True(t, a.NoRemoteJob(), "the person's word counts every send refused: the attempt may fail over")
		var submits int
		for _, ev := range stagetest.StoredEvents(t, pool, catalog.EventSubmitRequested) {
			var s task.SubmitRequested
			require.NoError(t, json.Unmarshal(ev.Envelope.Payload, &s))
			if s.TaskID == cur.ID && ev.Envelope.Producer == attention.Producer {
				submits++
				require.Equal(t, got.Version, s.Version)
			}
		}
		require.Equal(t, 1, submits)
		decision, job, _, _, n := audit(t, pool, cur.ID)
		require.Equal(t, 1, n)
		require.Equal(t, []string{"NO_JOB", ""}, []string{decision, job})
	})

	t.Run("refusals", func(t *testing.T) {
		cur, _ := lostAtRunway(t, pool)
		for _, d := range []attention.Decision{
			{TaskID: cur.ID, Ticket: "OPS-1", Operator: "alice"},
			{TaskID: cur.ID, JobID: "j", NoJob: true, Ticket: "OPS-1", Operator: "alice"},
			{TaskID: cur.ID, JobID: "j", Operator: "alice"},
			{TaskID: cur.ID, JobID: "j", Ticket: "OPS-1"},
		} {
			_, err := resolve(t, pool, d)
			require.Error(t, err, "%+v", d)
		}
		running := stagetest.NewTask(t, pool, nil, task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr("runway")}})
		_, err := resolve(t, pool, attention.Decision{TaskID: running.ID, JobID: "j", Ticket: "OPS-1", Operator: "alice"})
		require.ErrorIs(t, err, attention.ErrNotResolvable, "a task the pipeline is still working on")
		_, _, _, _, n := audit(t, pool, cur.ID)
		require.Zero(t, n)
	})

	t.Run("not a lost submit", func(t *testing.T) {
		// Handed over for another reason, with an attempt whose answer
		// was lost: what a person found at the provider does not answer it.
		other, _ := handedOver(t, pool, "media.source_missing", true)
		// Handed over as a lost submit, but no attempt lost its answer.
		unattempted, _ := handedOver(t, pool, attention.SubmitUnknown, false)
		for _, cur := range []task.Task{other, unattempted} {
			_, err := resolve(t, pool, attention.Decision{TaskID: cur.ID, NoJob: true, Ticket: "OPS-2", Operator: "alice"})
			require.ErrorIs(t, err, attention.ErrNotResolvable, "%s %s", cur.Status, cur.ErrorCode)
			got, err := task.Get(t.Context(), pool, cur.ID)
			require.NoError(t, err)
			require.Equal(t, [2]any{task.NeedsAttention, cur.Version}, [2]any{got.Status, got.Version}, "a refused decision leaves the task as it is")
			_, _, _, _, n := audit(t, pool, cur.ID)
			require.Zero(t, n)
		}
		_, err := resolve(t, pool, attention.Decision{TaskID: other.ID, NoJob: true, Ticket: "OPS-2", Operator: "alice"})
		require.EqualError(t, err, "task is not resolvable: task "+other.ID.String()+" is NEEDS_ATTENTION media.source_missing; "+
			"only a task in NEEDS_ATTENTION reconcile.submit_unknown is resolved here", "the refusal says what the task is")

		unknown := uuid.New()
		_, err = resolve(t, pool, attention.Decision{TaskID: unknown, NoJob: true, Ticket: "OPS-2", Operator: "alice"})
		require.ErrorIs(t, err, task.ErrNotFound)
		require.EqualError(t, err, "task "+unknown.String()+": task not found")
	})
}
