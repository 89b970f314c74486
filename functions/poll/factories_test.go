package poll_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
	timeline     = stagetest.Timeline
)

// fakeProvider answers Get with a scripted job and counts the calls.
type fakeProvider struct {
	provider.Client
	mu  sync.Mutex
	job func(n int) (provider.Job, error)
	// canceled lists the jobs Cancel was called for; cancelAnswer, when
	// set, is what Cancel answers (the job canceled otherwise).
	canceled     []string
	cancelAnswer func() (provider.Job, error)
	gets         int
}

func (f *fakeProvider) Name() string { return providerName }

func (f *fakeProvider) Get(_ context.Context, jobID string) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	j, err := f.job(f.gets)
	if err == nil {
		j.ID = jobID
	}
	return j, err
}

// Cancel records the job it was asked to stop.
func (f *fakeProvider) Cancel(_ context.Context, jobID string) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.canceled = append(f.canceled, jobID)
	if f.cancelAnswer != nil {
		j, err := f.cancelAnswer()
		j.ID = jobID
		return j, err
	}
	return provider.Job{ID: jobID, Status: provider.StatusCanceled}, nil
}

func (f *fakeProvider) cancels() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.canceled...)
}

func (f *fakeProvider) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

// jobIs is a script that always answers a job in status.
func jobIs(status provider.Status) func(int) (provider.Job, error) {
	return func(int) (provider.Job, error) { return provider.Job{Status: status, Progress: 40}, nil }
}

const (
	providerName = "fake"
	jobID        = "job-1"
)

// runningTask creates a tenant and a task that the submit stage took to
// PROVIDER_RUNNING with job jobID, through the state machine, and returns
// it with its accepted attempt. next_poll_at is pollAt.
func runningTask(t *testing.T, pool *pgxpool.Pool, pollAt time.Time) (task.Task, uuid.UUID) {
	t.Helper()
	cur := stagetest.NewTask(t, pool, nil,
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}},
		task.Transition{To: task.ProviderRunning,
			Set: task.Fields{ProviderJobID: task.Ptr(jobID), NextPollAt: &pollAt, DeadlineAt: task.Ptr(time.Now().Add(journey.MaxWait))}})
	attemptID := uuid.Must(uuid.NewV7())
	_, err := pool.Exec(t.Context(), `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key,
		client_request_id, provider_job_id, status, request_started_at, response_at)
		VALUES ($1, $2, 1, $3, 'm', $4, $5, $6, 'ACCEPTED', now(), now())`,
		attemptID, cur.ID, providerName, cur.ID.String()+"-1", attemptID.String(), jobID)
	require.NoError(t, err)
	return cur, attemptID
}

// attemptState is the status and error code of an attempt.
func attemptState(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (status, code string) {
	t.Helper()
	var c *string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT status, error_code FROM task_attempts WHERE attempt_id = $1`, id).Scan(&status, &c))
	if c != nil {
		code = *c
	}
	return status, code
}

// requireAfterDelay checks that at lies d after a moment in [before,
// after]: the stage's own "now" is somewhere in there.
func requireAfterDelay(t *testing.T, at time.Time, d time.Duration, before, after time.Time) {
	t.Helper()
	lo, hi := before.Add(d).Add(-time.Millisecond), after.Add(d).Add(time.Millisecond)
	require.True(t, !at.Before(lo) && !at.After(hi), "%s is not %s after a moment in [%s, %s]", at, d, before, after)
}
