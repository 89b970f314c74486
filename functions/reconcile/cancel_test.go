package reconcile_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// jobLooker answers Get with a scripted job and records Cancel calls.
type jobLooker struct {
	provider.Client
	mu      sync.Mutex
	job     provider.Job
	err     error
	cancels int
}

func (f *jobLooker) Name() string { return providerName }

func (f *jobLooker) Get(context.Context, string) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.job, f.err
}

func (f *jobLooker) Cancel(context.Context, string) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels++
	return f.job, f.err
}

// cancelReconcilingTask is a task whose client canceled while its job ran,
// and whose provider did not answer the cancel.
func cancelReconcilingTask(t *testing.T) (*testBundle, uuid.UUID) {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t)}
	b.task = stagetest.NewTask(t, b.pool, nil,
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}},
		task.Transition{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr("job-1"), CancelRequested: task.Ptr(true)}},
		task.Transition{To: task.CancelReconciling})
	attemptID := uuid.New()
	_, err := b.pool.Exec(t.Context(), `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key, client_request_id, provider_job_id, status)
		VALUES ($1, $2::uuid, 1, $3, 'm', $2::uuid::text || '-1', 'crid', 'job-1', 'ACCEPTED')`, attemptID, b.task.ID, providerName)
	require.NoError(t, err)
	return b, attemptID
}

func (b *testBundle) look(t *testing.T, f *jobLooker, attemptID uuid.UUID, round int) error {
	t.Helper()
	fn := reconcile.New(reconcile.Params{Pool: b.pool, Providers: provider.Single(f), Journey: journey, Timeout: time.Second})
	_, err := fn.Handle(t.Context(), cloudEvent(t, b.task, uuid.NewString(), catalog.EventReconcileDue,
		task.ReconcileDue{TaskID: b.task.ID, AttemptID: attemptID, Round: round, Wait: task.Wait{Reason: task.ReasonCancel}}))
	return err
}

func (b *testBundle) status(t *testing.T) task.Status {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got.Status
}

func TestCancelLookFindsTheJobStopped(t *testing.T) {
	t.Parallel()
	b, attemptID := cancelReconcilingTask(t)
	require.NoError(t, b.look(t, &jobLooker{job: provider.Job{Status: provider.StatusCanceled}}, attemptID, 0))
	require.Equal(t, task.Canceled, b.status(t))
}

func TestCancelLookFindsTheJobFinishedFirst(t *testing.T) {
	t.Parallel()
	b, attemptID := cancelReconcilingTask(t)
	require.NoError(t, b.look(t, &jobLooker{job: provider.Job{Status: provider.StatusSucceeded}}, attemptID, 0))
	require.Equal(t, task.Fetching, b.status(t), "the output is fetched; the task ends CANCELED_WITH_OUTPUT")
}

func TestCancelLookStillRunningAsksAgain(t *testing.T) {
	t.Parallel()
	b, attemptID := cancelReconcilingTask(t)
	f := &jobLooker{job: provider.Job{Status: provider.StatusRunning}}
	require.NoError(t, b.look(t, f, attemptID, 0))
	require.Equal(t, task.CancelReconciling, b.status(t))
	require.Equal(t, 1, f.cancels, "a job still running is asked to stop again")
}

func TestCancelLookUnknownTooLongNeedsAttention(t *testing.T) {
	t.Parallel()
	b, attemptID := cancelReconcilingTask(t)
	f := &jobLooker{err: &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}}
	require.NoError(t, b.look(t, f, attemptID, journey.ReconcileRounds-1))
	require.Equal(t, task.NeedsAttention, b.status(t))
	require.Contains(t, b.reload(t).ErrorMessage, "last: "+string(provider.ClassUnavailable)+")",
		"the message names what the last look found")
}
