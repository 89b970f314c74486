package poll_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/poll"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/live"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

var journey = config.Journey{PollFirst: 5 * time.Second, PollMax: time.Minute, MaxWait: time.Hour, RetryBase: time.Second,
	RetryMax: time.Minute, MaxRetries: 3, ReconcileAfter: 20 * time.Second, ReconcileRounds: 3,
	SlotsPerTenant: 1, SlotsPerModel: 1, SlotsPerProv: 1, SlotLease: time.Hour}

type testBundle struct {
	pool      *pgxpool.Pool
	rdb       *redis.Client
	limiter   *slots.Limiter
	fake      *fakeProvider
	fn        *stage.Function
	task      task.Task
	attemptID uuid.UUID
}

// setup makes a PROVIDER_RUNNING task whose poll is due (next_poll_at a
// second ago) and holds its generation slots, and a poll function whose
// provider answers with job.
func setup(t *testing.T, job func(n int) (provider.Job, error)) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t), rdb: newRedis(t), fake: &fakeProvider{job: job}}
	prefix := "aivedio:test:poll:" + uuid.NewString() + ":"
	t.Cleanup(func() { require.NoError(t, deleteKeys(b.rdb, prefix)) })
	b.limiter = slots.New(b.rdb, &slots.Opts{KeyPrefix: prefix})
	b.task, b.attemptID = runningTask(t, b.pool, time.Now().Add(-time.Second).UTC().Truncate(time.Microsecond))
	t.Cleanup(func() { _ = b.rdb.Del(t.Context(), live.KeyPrefix+"progress:"+b.task.ID.String()).Err() })
	_, err := b.limiter.Acquire(t.Context(), stage.GenerationSlots(b.task, providerName, journey))
	require.NoError(t, err)
	b.fn = poll.New(poll.Params{Pool: b.pool, Providers: provider.Single(b.fake), Redis: b.rdb, Slots: b.limiter, Journey: journey, Timeout: time.Second})
	return b
}

// poll delivers a poll of the task's attempt scheduled for pollAt.
func (b *testBundle) poll(t *testing.T, eventID string, pollAt time.Time) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventPollDue,
		task.PollDue{TaskID: b.task.ID, AttemptID: b.attemptID, PollAt: pollAt}))
	return err
}

// callback delivers a verified provider callback about job.
func (b *testBundle) callback(t *testing.T, eventID, job string) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventCallbackReceived,
		task.CallbackReceived{Provider: providerName, ProviderJobID: job}))
	return err
}

func (b *testBundle) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got
}

// slotsHeld is how many holders the task's tenant scope has.
func (b *testBundle) slotsHeld(t *testing.T) int {
	t.Helper()
	n, err := b.limiter.InUse(t.Context(), "tenant:"+b.task.TenantID.String())
	require.NoError(t, err)
	return n
}

func TestDuePollOfRunningJobReschedules(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusRunning))
	id := uuid.NewString()
	before := time.Now()
	require.NoError(t, b.poll(t, id, *b.task.NextPollAt))
	after := time.Now()

	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, b.task.Version, got.Version, "a poll that finds the job running changes no version")
	require.Equal(t, []task.Status{task.Queued, task.Submitting, task.ProviderRunning}, timeline(t, b.pool, b.task.ID))
	require.NotNil(t, got.NextPollAt)
	require.True(t, got.NextPollAt.After(*b.task.NextPollAt))
	// The job is young: the next poll is POLL_FIRST_DELAY away.
	requireAfterDelay(t, *got.NextPollAt, journey.PollFirst, before, after)

	polls := storedEvents(t, b.pool, catalog.EventPollDue)
	require.Len(t, polls, 1)
	require.True(t, polls[0].DeliverAt.Equal(*got.NextPollAt), "the delayed event is due when next_poll_at says")
	var due task.PollDue
	require.NoError(t, json.Unmarshal(polls[0].Envelope.Payload, &due))
	require.Equal(t, b.task.ID, due.TaskID)
	require.Equal(t, b.attemptID, due.AttemptID)
	require.True(t, due.PollAt.Equal(*got.NextPollAt), "the event names the chain's new poll_at")
	require.Equal(t, id, polls[0].Envelope.CausationID)
	require.Equal(t, task.Wait{ExpectedStatus: task.ProviderRunning, ExpectedVersion: b.task.Version, NotBefore: due.PollAt,
		Reason: "provider job running", RetryAttempt: 1}, due.Wait, "the delayed poll carries its wait (seed 7.12.1)")

	progress, ok, err := live.Progress(t.Context(), b.rdb, b.task.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 40, progress)
	require.Equal(t, 1, b.fake.calls())
	require.Equal(t, 1, b.slotsHeld(t), "a running job keeps its slots")
	require.Equal(t, "APPLIED", inboxResult(t, b.pool, catalog.GroupPoll.Name, id))
}

// TestAThrottledJobIsPolledLessOften: the provider holds the job for our
// account's concurrency limit; the next poll waits twice the usual time.
func TestAThrottledJobIsPolledLessOften(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{ID: "job-1", Status: provider.StatusQueued, Throttled: true}, nil
	})
	before := time.Now()
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))
	after := time.Now()
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	requireAfterDelay(t, *got.NextPollAt, 2*journey.PollFirst, before, after)
	polls := storedEvents(t, b.pool, catalog.EventPollDue)
	require.Len(t, polls, 1)
	var due task.PollDue
	require.NoError(t, json.Unmarshal(polls[0].Envelope.Payload, &due))
	require.Contains(t, due.Reason, "throttled")
}

func TestStalePollDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	id := uuid.NewString()
	// A poll of a chain that has moved on: its poll_at is not next_poll_at.
	require.NoError(t, b.poll(t, id, b.task.NextPollAt.Add(-time.Minute)))

	got := b.reload(t)
	require.Equal(t, b.task.Version, got.Version)
	require.True(t, got.NextPollAt.Equal(*b.task.NextPollAt))
	require.Zero(t, b.fake.calls(), "a stale poll does not ask the provider")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPollDue))
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupPoll.Name, id))
}

// TestPollOfAnotherVersionDoesNothing: a delayed poll whose wait expects
// the task at a version it has left is a stale no-op, even on the live
// chain's poll_at.
func TestPollOfAnotherVersionDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	id := uuid.NewString()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, id, catalog.EventPollDue,
		task.PollDue{TaskID: b.task.ID, AttemptID: b.attemptID, PollAt: *b.task.NextPollAt,
			Wait: task.Wait{ExpectedStatus: task.ProviderRunning, ExpectedVersion: b.task.Version - 1, Reason: "test"}}))
	require.NoError(t, err)
	require.Zero(t, b.fake.calls(), "a stale poll does not ask the provider")
	require.Equal(t, b.task.Version, b.reload(t).Version)
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupPoll.Name, id))
}

func TestEarlyPollIsPutBackAtItsTime(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	pollAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_poll_at = $2 WHERE task_id = $1`, b.task.ID, pollAt)
	require.NoError(t, err)

	require.NoError(t, b.poll(t, uuid.NewString(), pollAt))
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, b.task.Version, got.Version)
	require.True(t, got.NextPollAt.Equal(pollAt), "the chain keeps its time")
	require.Zero(t, b.fake.calls(), "an early poll does not ask the provider")
	polls := storedEvents(t, b.pool, catalog.EventPollDue)
	require.Len(t, polls, 1)
	require.True(t, polls[0].DeliverAt.Equal(pollAt), "put back at %s, got %s", pollAt, polls[0].DeliverAt)
}

func TestSucceededJobFetches(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))

	got := b.reload(t)
	require.Equal(t, task.Fetching, got.Status)
	require.Equal(t, b.task.Version+1, got.Version)
	require.Equal(t, 100, got.Progress)
	fetches := storedEvents(t, b.pool, catalog.EventFetchRequested)
	require.Len(t, fetches, 1)
	var req task.FetchRequested
	require.NoError(t, json.Unmarshal(fetches[0].Envelope.Payload, &req))
	require.Equal(t, task.FetchRequested{TaskID: b.task.ID, AttemptID: b.attemptID}, req)
	status, _ := attemptState(t, b.pool, b.attemptID)
	require.Equal(t, "SUCCEEDED", status)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPollDue), "the chain ends")
	require.Zero(t, b.slotsHeld(t), "the ended job frees its slots")
}

func TestFailedJobFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{Status: provider.StatusFailed, ErrorCode: "content_policy", ErrorMessage: "prompt refused"}, nil
	})
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))

	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "provider.job_failed", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "prompt refused")
	settles := storedEvents(t, b.pool, catalog.EventSettleRequested)
	require.Len(t, settles, 1)
	var req task.SettleRequested
	require.NoError(t, json.Unmarshal(settles[0].Envelope.Payload, &req))
	require.Equal(t, task.SettleRequested{TaskID: b.task.ID, Status: task.Failed}, req)
	status, code := attemptState(t, b.pool, b.attemptID)
	require.Equal(t, "FAILED", status)
	require.Equal(t, "content_policy", code)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventFetchRequested))
	require.Zero(t, b.slotsHeld(t))
}

// TestAJobStoppedByModerationIsContentRejected: the provider's content
// policy ended the job; the task fails as content_rejected, released, and
// nothing is submitted again.
func TestAJobStoppedByModerationIsContentRejected(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{Status: provider.StatusFailed, ContentRejected: true, ErrorCode: "SAFETY.OUTPUT.VIDEO", ErrorMessage: "output flagged"}, nil
	})
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))
	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, provider.CodeContentRejected, got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "output flagged")
	require.Len(t, storedEvents(t, b.pool, catalog.EventSettleRequested), 1, "the reservation is released")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSubmitRequested), "no retry")
	status, code := attemptState(t, b.pool, b.attemptID)
	require.Equal(t, "FAILED", status)
	require.Equal(t, "SAFETY.OUTPUT.VIDEO", code)
	require.Zero(t, b.slotsHeld(t))
}

func TestLostJobFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassNotFound, StatusCode: http.StatusNotFound}
	})
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))
	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "provider.job_lost", got.ErrorCode)
	require.Len(t, storedEvents(t, b.pool, catalog.EventSettleRequested), 1)
}

func TestUnreachableProviderPollsAgainLater(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests, RetryAfter: 30 * time.Second}
	})
	before := time.Now()
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt), "a provider hiccup is a wait, not a failure")
	after := time.Now()
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, b.task.Version, got.Version)
	requireAfterDelay(t, *got.NextPollAt, 30*time.Second, before, after) // Retry-After is honoured
	require.Len(t, storedEvents(t, b.pool, catalog.EventPollDue), 1)
}

func TestPastTheDeadlineFails(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusRunning))
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET deadline_at = now() - interval '1 second' WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))

	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "provider.max_wait_exceeded", got.ErrorCode)
	require.Len(t, storedEvents(t, b.pool, catalog.EventSettleRequested), 1)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPollDue), "the chain ends")
	status, code := attemptState(t, b.pool, b.attemptID)
	require.Equal(t, "FAILED", status)
	require.Equal(t, "max_wait", code)
	require.Equal(t, []string{b.task.ProviderJobID}, b.fake.cancels(), "the remote job is stopped too")
	require.Zero(t, b.slotsHeld(t))
}

func TestCallbackOfSucceededJobFetches(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	require.NoError(t, b.callback(t, uuid.NewString(), jobID))

	got := b.reload(t)
	require.Equal(t, task.Fetching, got.Status)
	require.Equal(t, 1, b.fake.calls(), "the provider, not the callback, says the job is over")
	fetches := storedEvents(t, b.pool, catalog.EventFetchRequested)
	require.Len(t, fetches, 1)
	var req task.FetchRequested
	require.NoError(t, json.Unmarshal(fetches[0].Envelope.Payload, &req))
	require.Equal(t, task.FetchRequested{TaskID: b.task.ID, AttemptID: b.attemptID}, req,
		"the fetch a callback asks for names the attempt, as a poll's does")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPollDue), "a callback does not touch the poll chain")
	require.Zero(t, b.slotsHeld(t))

	// The poll that was on its way finds the chain ended.
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))
	require.Equal(t, got.Version, b.reload(t).Version)
	require.Equal(t, 1, b.fake.calls())
}

func TestCallbackOfRunningJobChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusRunning))
	id := uuid.NewString()
	require.NoError(t, b.callback(t, id, jobID))

	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, b.task.Version, got.Version)
	require.True(t, got.NextPollAt.Equal(*b.task.NextPollAt), "the poll chain carries on as scheduled")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPollDue))
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupCallback.Name, id))
	require.Equal(t, 1, b.slotsHeld(t))
}

func TestCallbackOfAnotherJobChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	require.NoError(t, b.callback(t, uuid.NewString(), "job-of-an-earlier-attempt"))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)
	require.Zero(t, b.fake.calls())
}

func TestDuplicateDeliveryHappensOnce(t *testing.T) {
	t.Parallel()
	t.Run("reschedule", func(t *testing.T) {
		t.Parallel()
		b := setup(t, jobIs(provider.StatusRunning))
		id := uuid.NewString()
		require.NoError(t, b.poll(t, id, *b.task.NextPollAt))
		next := b.reload(t).NextPollAt
		require.NoError(t, b.poll(t, id, *b.task.NextPollAt))
		require.Equal(t, 1, b.fake.calls())
		require.Len(t, storedEvents(t, b.pool, catalog.EventPollDue), 1, "one chain, not two")
		require.True(t, b.reload(t).NextPollAt.Equal(*next))
	})
	t.Run("end", func(t *testing.T) {
		t.Parallel()
		b := setup(t, jobIs(provider.StatusSucceeded))
		id := uuid.NewString()
		require.NoError(t, b.poll(t, id, *b.task.NextPollAt))
		require.NoError(t, b.poll(t, id, *b.task.NextPollAt))
		require.Equal(t, 1, b.fake.calls())
		require.Equal(t, b.task.Version+1, b.reload(t).Version)
		require.Equal(t, []task.Status{task.Queued, task.Submitting, task.ProviderRunning, task.Fetching}, timeline(t, b.pool, b.task.ID))
		require.Len(t, storedEvents(t, b.pool, catalog.EventFetchRequested), 1)
	})
	t.Run("callback", func(t *testing.T) {
		t.Parallel()
		b := setup(t, jobIs(provider.StatusSucceeded))
		id := uuid.NewString()
		require.NoError(t, b.callback(t, id, jobID))
		require.NoError(t, b.callback(t, id, jobID))
		require.Equal(t, 1, b.fake.calls())
		require.Len(t, storedEvents(t, b.pool, catalog.EventFetchRequested), 1)
	})
}

func TestAnotherTenantsPollIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, jobIs(provider.StatusSucceeded))
	other := b.task
	other.TenantID = uuid.New()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, other, uuid.NewString(), catalog.EventPollDue,
		task.PollDue{TaskID: b.task.ID, AttemptID: b.attemptID, PollAt: *b.task.NextPollAt}))
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)
	require.Zero(t, b.fake.calls())
}

// TestAJobOfAnotherAttemptIsNotApplied: a poll whose job carries another
// request's client request id (the job id was reused) applies nothing of
// it, neither its success nor its output: the task goes to NEEDS_ATTENTION
// naming both ids, and the refusal is counted.
func TestAJobOfAnotherAttemptIsNotApplied(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{ID: jobID, ClientRequestID: "crid-of-another-run", Status: provider.StatusSucceeded,
			OutputURL: "https://provider.example/out.mp4", Progress: 100}, nil
	})
	before := stagetest.IdentityMismatches(t, providerName, provider.CheckedAtPoll)
	require.NoError(t, b.poll(t, uuid.NewString(), *b.task.NextPollAt))

	got := b.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "provider.identity_mismatch", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "crid-of-another-run")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventFetchRequested), "no fetch of another attempt's output")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSettleRequested), "nothing charged")
	require.Equal(t, before+1, stagetest.IdentityMismatches(t, providerName, provider.CheckedAtPoll))
	require.Zero(t, b.slotsHeld(t), "the task's slots are freed")

	// A job that echoes this attempt's own id is applied as before.
	var ok *testBundle
	ok = setup(t, func(int) (provider.Job, error) {
		return provider.Job{ID: jobID, ClientRequestID: ok.attemptID.String(), Status: provider.StatusSucceeded, OutputURL: "https://provider.example/out.mp4"}, nil
	})
	require.NoError(t, ok.poll(t, uuid.NewString(), *ok.task.NextPollAt))
	require.Equal(t, task.Fetching, ok.reload(t).Status)
}
