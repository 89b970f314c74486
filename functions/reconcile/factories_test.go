package reconcile_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// Helpers every stage test shares.
var (
	cloudEvent   = stagetest.CloudEvent
	statusOf     = stagetest.StatusOf
	storedEvents = stagetest.StoredEvents
	inboxResult  = stagetest.InboxResult
	newRedis     = stagetest.NewRedis
	deleteKeys   = stagetest.DeleteKeys
)

const providerName = "fake"

// lookup is one FindByClientRequestID call.
type lookup struct {
	ClientRequestID string
	Since           time.Time
}

// fakeProvider answers lookups by client request id with a scripted
// result and Submit with a new job, recording both.
type fakeProvider struct {
	provider.Client
	mu      sync.Mutex
	find    func(n int) (provider.Job, error)
	lookups []lookup
	submits []provider.SubmitRequest
}

func (f *fakeProvider) Name() string { return providerName }

func (f *fakeProvider) FindByClientRequestID(_ context.Context, clientRequestID string, since time.Time) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lookups = append(f.lookups, lookup{clientRequestID, since})
	return f.find(len(f.lookups))
}

// calls counts the lookups and submits made so far.
func (f *fakeProvider) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lookups) + len(f.submits)
}

func (f *fakeProvider) Submit(_ context.Context, req provider.SubmitRequest) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits = append(f.submits, req)
	return provider.Job{ID: "job-resubmitted", Status: provider.StatusQueued}, nil
}

// attempt is the task_attempts row the lost submit left.
type attempt struct {
	ID              uuid.UUID
	IdempotencyKey  string
	ClientRequestID string
	StartedAt       time.Time
}

// reconcilingTask creates a tenant and a task whose submit answer was
// lost: SUBMITTING -> RECONCILING with its attempt SUBMIT_UNKNOWN, as the
// submit stage leaves it.
func reconcilingTask(t *testing.T, pool *pgxpool.Pool) (task.Task, attempt) {
	t.Helper()
	cur := stagetest.NewTask(t, pool, nil,
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}},
		task.Transition{To: task.Reconciling, Reason: "submit answer lost"})
	a := attempt{ID: uuid.Must(uuid.NewV7()), IdempotencyKey: cur.ID.String() + "-1"}
	a.ClientRequestID = a.ID.String()
	require.NoError(t, pool.QueryRow(t.Context(), `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key,
		client_request_id, status, error_code, request_started_at, response_at)
		VALUES ($1, $2, 1, $3, 'm', $4, $5, 'SUBMIT_UNKNOWN', 'timeout_unknown', now() - interval '1 minute', now())
		RETURNING request_started_at`, a.ID, cur.ID, providerName, a.IdempotencyKey, a.ClientRequestID).Scan(&a.StartedAt))
	return cur, a
}

// attemptRow is what the reconciler may change of an attempt.
type attemptRow struct {
	ID             uuid.UUID
	Status         string
	IdempotencyKey string
	ProviderJobID  *string
}

// attempts lists a task's attempts in order.
func attempts(t *testing.T, pool *pgxpool.Pool, taskID uuid.UUID) []attemptRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT attempt_id, status, provider_idempotency_key, provider_job_id
		FROM task_attempts WHERE task_id = $1 ORDER BY attempt_no`, taskID)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[attemptRow])
	require.NoError(t, err)
	return got
}

// requireAfterDelay checks that at lies d after a moment in [before,
// after]: the stage's own "now" is somewhere in there.
func requireAfterDelay(t *testing.T, at time.Time, d time.Duration, before, after time.Time) {
	t.Helper()
	lo, hi := before.Add(d).Add(-time.Millisecond), after.Add(d).Add(time.Millisecond)
	require.True(t, !at.Before(lo) && !at.After(hi), "%s is not %s after a moment in [%s, %s]", at, d, before, after)
}
