package fetch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/blob"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// Helpers every stage test shares.
var (
	cloudEvent   = stagetest.CloudEvent
	storedEvents = stagetest.StoredEvents
	inboxResult  = stagetest.InboxResult
	newStore     = stagetest.NewStore
	removeAfter  = stagetest.RemoveAfter
)

const (
	providerName = "fake"
	jobID        = "job-1"
)

// fakeProvider says the job succeeded and answers Download with the
// scripted output, counting both calls.
type fakeProvider struct {
	provider.Client
	mu        sync.Mutex
	download  func(n int) (provider.Output, error)
	gets      int
	downloads int
}

func (f *fakeProvider) Name() string { return providerName }

func (f *fakeProvider) Get(_ context.Context, id string) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gets++
	return provider.Job{ID: id, Status: provider.StatusSucceeded, Progress: 100, OutputURL: "https://provider.test/outputs/" + id}, nil
}

func (f *fakeProvider) Download(_ context.Context, job provider.Job) (provider.Output, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if job.OutputURL == "" {
		return provider.Output{}, errors.New("fake: download of a job without an output URL")
	}
	f.downloads++
	return f.download(f.downloads)
}

// counts returns how often Get and Download were called.
func (f *fakeProvider) counts() (gets, downloads int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets, f.downloads
}

// fetchingTask creates a tenant and a task whose provider job succeeded:
// QUEUED -> SUBMITTING -> PROVIDER_RUNNING -> FETCHING through the state
// machine, with its attempt SUCCEEDED.
func fetchingTask(t *testing.T, pool *pgxpool.Pool) (task.Task, uuid.UUID) {
	t.Helper()
	pollAt := time.Now().UTC().Truncate(time.Microsecond)
	cur := stagetest.NewTask(t, pool, nil,
		task.Transition{To: task.Submitting, Set: task.Fields{Provider: task.Ptr(providerName)}},
		task.Transition{To: task.ProviderRunning, Set: task.Fields{ProviderJobID: task.Ptr(jobID), NextPollAt: &pollAt, DeadlineAt: task.Ptr(pollAt.Add(time.Hour))}},
		task.Transition{To: task.Fetching, Set: task.Fields{Progress: task.Ptr(100)}})
	attemptID := uuid.Must(uuid.NewV7())
	_, err := pool.Exec(t.Context(), `INSERT INTO task_attempts (attempt_id, task_id, attempt_no, provider, model, provider_idempotency_key,
		client_request_id, provider_job_id, status) VALUES ($1, $2, 1, $3, 'm', $4, $5, $6, 'SUCCEEDED')`,
		attemptID, cur.ID, providerName, cur.ID.String()+"-1", attemptID.String(), jobID)
	require.NoError(t, err)
	return cur, attemptID
}

// outputKey is where the fetch stage stores tk's output.
func outputKey(t *testing.T, tk task.Task) string {
	t.Helper()
	key, err := blob.Key(tk.TenantID.String(), tk.ID.String(), "output", "video.mp4")
	require.NoError(t, err)
	return key
}

// assetRow is the part of an assets row the fetch stage writes.
type assetRow struct {
	ID          uuid.UUID
	Kind        string
	ObjectKey   string
	SHA256      []byte
	Size        int64
	ContentType string
}

// assets lists a task's assets.
func assets(t *testing.T, pool *pgxpool.Pool, taskID uuid.UUID) []assetRow {
	t.Helper()
	rows, err := pool.Query(t.Context(), `SELECT asset_id, kind, object_key, checksum_sha256, size_bytes, content_type
		FROM assets WHERE task_id = $1 ORDER BY created_at`, taskID)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[assetRow])
	require.NoError(t, err)
	return got
}
