package submit_test

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// fakeProvider answers Submit with the scripted result and records the
// idempotency keys it was called with.
type fakeProvider struct {
	provider.Client
	mu     sync.Mutex
	answer func(n int) (provider.Job, error)
	keys   []string
	// noDedup makes it a provider without idempotency keys (Runway).
	noDedup bool
}

func (f *fakeProvider) Name() string { return "fake" }

// DedupsByIdempotencyKey: the fake stands for a provider that starts one
// job per key (as the simulator does), unless told otherwise.
func (f *fakeProvider) DedupsByIdempotencyKey() bool { return !f.noDedup }

func (f *fakeProvider) Submit(_ context.Context, req provider.SubmitRequest) (provider.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keys = append(f.keys, req.IdempotencyKey)
	return f.answer(len(f.keys))
}

func (f *fakeProvider) submits() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.keys)
}

type testBundle struct {
	pool *pgxpool.Pool
	fake *fakeProvider
	fn   *stage.Function
	task task.Task
}

var journey = config.Journey{PollFirst: 5 * time.Second, PollMax: time.Minute, MaxWait: time.Hour, RetryBase: time.Second,
	RetryMax: time.Minute, MaxRetries: 3, ReconcileAfter: 20 * time.Second, ReconcileRounds: 3,
	SlotsPerTenant: 1, SlotsPerModel: 1, SlotsPerProv: 1, SlotLease: time.Hour}

func setup(t *testing.T, answer func(n int) (provider.Job, error)) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t), fake: &fakeProvider{answer: answer}}
	b.task = stagetest.NewTask(t, b.pool, nil)
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: provider.Single(b.fake), Journey: journey, Timeout: time.Second})
	return b
}

// deliver hands the function a submit event for the task, as the adapter
// would, and returns its result.
func (b *testBundle) deliver(t *testing.T, eventID string) error {
	t.Helper()
	return b.deliverCtx(t.Context(), t, eventID)
}

// deliverCtx is deliver under ctx.
func (b *testBundle) deliverCtx(ctx context.Context, t *testing.T, eventID string) error {
	t.Helper()
	env, err := envelope.New(envelope.NewParams{EventID: eventID, EventType: catalog.EventSubmitRequested, Producer: "api",
		AggregateType: task.AggregateType, AggregateID: b.task.ID.String(), TenantID: b.task.TenantID.String(),
		Payload: task.SubmitRequested{TaskID: b.task.ID, Version: 1}})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	_, err = b.fn.Handle(ctx, ce)
	return err
}

// deliverScheduled delivers the last submit event the stage wrote (the
// delayed resubmit of a wait), as the broker would once it is due.
func (b *testBundle) deliverScheduled(t *testing.T) error {
	t.Helper()
	evs := stagetest.StoredEvents(t, b.pool, catalog.EventSubmitRequested)
	require.NotEmpty(t, evs, "no resubmit scheduled")
	ce, err := evs[len(evs)-1].Envelope.ToCloudEvent()
	require.NoError(t, err)
	_, err = b.fn.Handle(t.Context(), ce)
	return err
}

// testLimiter is a slot limiter on the test Redis, under keys of its own.
func testLimiter(t *testing.T) *slots.Limiter {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return slots.New(rdb, &slots.Opts{KeyPrefix: "test:" + uuid.NewString() + ":"})
}

func (b *testBundle) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got
}

func (b *testBundle) pending(t *testing.T, eventType string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE event_type = $1`, eventType).Scan(&n))
	return n
}

// requireWaited checks that a wait decided during a delivery that ran from
// before to after ends wait after the decision: bounds taken around the
// delivery, so a slow run cannot shorten it. The stage keeps microseconds.
func requireWaited(t *testing.T, until, before, after time.Time, wait time.Duration, msg string) {
	t.Helper()
	require.WithinRange(t, until, before.Add(wait).Truncate(time.Microsecond), after.Add(wait), msg)
}

func accepted(int) (provider.Job, error) {
	return provider.Job{ID: "job-1", Status: provider.StatusQueued}, nil
}

func TestAcceptedRunsAndSchedulesThePoll(t *testing.T) {
	t.Parallel()
	b := setup(t, accepted)
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id))
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "job-1", got.ProviderJobID)
	require.NotNil(t, got.NextPollAt)
	require.Equal(t, 1, b.pending(t, catalog.EventPollDue))
	polls := stagetest.StoredEvents(t, b.pool, catalog.EventPollDue)
	var due task.PollDue
	require.NoError(t, json.Unmarshal(polls[0].Envelope.Payload, &due))
	require.Equal(t, task.Wait{ExpectedStatus: task.ProviderRunning, ExpectedVersion: got.Version, NotBefore: got.NextPollAt.UTC(),
		Reason: "provider accepted"}, due.Wait, "the first poll carries its wait (seed 7.12.1)")

	// The same event again is a duplicate: no second call, no second poll.
	require.NoError(t, b.deliver(t, id))
	require.Len(t, b.fake.keys, 1)
	require.Equal(t, 1, b.pending(t, catalog.EventPollDue))
}

// TestAJobFinishedInTheAnswerIsPolledAtOnce: a job the submit's answer
// reports finished is polled at once, as its slots are held until the poll
// ends it; a queued one after POLL_FIRST_DELAY.
func TestAJobFinishedInTheAnswerIsPolledAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status provider.Status
		wait   time.Duration
	}{{provider.StatusQueued, journey.PollFirst}, {provider.StatusRunning, journey.PollFirst}, {provider.StatusSucceeded, 0}, {provider.StatusFailed, 0}} {
		t.Run(string(tc.status), func(t *testing.T) {
			t.Parallel()
			b := setup(t, func(int) (provider.Job, error) { return provider.Job{ID: "job-1", Status: tc.status}, nil })
			before := time.Now()
			require.NoError(t, b.deliver(t, uuid.NewString()))
			after := time.Now()
			got := b.reload(t)
			require.Equal(t, task.ProviderRunning, got.Status)
			require.NotNil(t, got.NextPollAt)
			requireWaited(t, *got.NextPollAt, before, after, tc.wait, "first poll of a "+string(tc.status)+" job")
		})
	}
}

func TestRateLimitedWaitsAndRetriesWithTheSameKey(t *testing.T) {
	t.Parallel()
	b := setup(t, func(n int) (provider.Job, error) {
		if n == 1 {
			return provider.Job{}, &provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests, RetryAfter: 7 * time.Second}
		}
		return accepted(n)
	})
	before := time.Now()
	require.NoError(t, b.deliver(t, uuid.NewString()), "a 429 is a business wait, not a failure")
	after := time.Now()
	got := b.reload(t)
	require.Equal(t, task.WaitingRetry, got.Status)
	require.NotNil(t, got.NextRetryAt)
	requireWaited(t, *got.NextRetryAt, before, after, 7*time.Second, "Retry-After is honoured")
	require.Equal(t, 1, b.pending(t, catalog.EventSubmitRequested))

	// The delayed resubmit, once due.
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)
	require.NoError(t, b.deliver(t, uuid.NewString()))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)
	require.Len(t, b.fake.keys, 2)
	require.Equal(t, b.fake.keys[0], b.fake.keys[1], "the retry reaches the same remote job")
}

func TestLostAnswerReconcilesInsteadOfResubmitting(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassTimeoutUnknown, Err: context.DeadlineExceeded}
	})
	require.NoError(t, b.deliver(t, uuid.NewString()))
	got := b.reload(t)
	require.Equal(t, task.Reconciling, got.Status)
	require.Equal(t, 1, b.pending(t, catalog.EventReconcileDue))
	looks := stagetest.StoredEvents(t, b.pool, catalog.EventReconcileDue)
	var look task.ReconcileDue
	require.NoError(t, json.Unmarshal(looks[0].Envelope.Payload, &look))
	require.Equal(t, task.Wait{ExpectedStatus: task.Reconciling, ExpectedVersion: got.Version, NotBefore: looks[0].DeliverAt.UTC(),
		Reason: "submit answer lost"}, look.Wait, "the delayed look carries its wait (seed 7.12.1)")
	var status string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT status FROM task_attempts`).Scan(&status))
	require.Equal(t, "SUBMIT_UNKNOWN", status)
}

func TestRejectedFailsAndReleases(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, StatusCode: 422, Message: "prompt refused"}
	})
	require.NoError(t, b.deliver(t, uuid.NewString()))
	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "provider.rejected", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "prompt refused")
	require.Equal(t, 1, b.pending(t, catalog.EventSettleRequested))
}

func TestRetriesRunOut(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: 503}
	})
	require.NoError(t, b.deliver(t, uuid.NewString()))
	for range journey.MaxRetries {
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
		require.NoError(t, err)
		require.NoError(t, b.deliverScheduled(t))
	}
	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "submit.retries_exhausted", got.ErrorCode)
	require.Len(t, b.fake.keys, journey.MaxRetries+1, "the first submit and its retries")

	// The counts travel in the delayed resubmit (seed 7.12.1).
	evs := stagetest.StoredEvents(t, b.pool, catalog.EventSubmitRequested)
	var last task.SubmitRequested
	require.NoError(t, json.Unmarshal(evs[len(evs)-1].Envelope.Payload, &last))
	require.Equal(t, journey.MaxRetries, last.Refusals)
	require.Equal(t, journey.MaxRetries, last.RetryAttempt)
	require.Equal(t, task.WaitingRetry, last.ExpectedStatus)
}

func TestAnotherTenantsEventIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, accepted)
	env, err := envelope.New(envelope.NewParams{EventType: catalog.EventSubmitRequested, Producer: "api",
		AggregateType: task.AggregateType, AggregateID: b.task.ID.String(), TenantID: uuid.NewString(),
		Payload: task.SubmitRequested{TaskID: b.task.ID, Version: 1}})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	_, err = b.fn.Handle(t.Context(), ce)
	require.ErrorContains(t, err, "belongs to another tenant")
	require.Equal(t, task.Queued, b.reload(t).Status)
	require.Empty(t, b.fake.keys)
}

// TestOpenCircuitWaitsInsteadOfHammering: while the provider's circuit is
// open, a submit is a business wait until the circuit half-opens.
func TestOpenCircuitWaitsInsteadOfHammering(t *testing.T) {
	t.Parallel()
	down := &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
	b := setup(t, func(int) (provider.Job, error) { return provider.Job{}, down })
	b.fn = submit.New(submit.Params{Pool: b.pool, Journey: journey, Timeout: time.Second,
		Providers: provider.Single(provider.WithBreaker(b.fake, provider.BreakerSettings{Failures: 1, Open: 30 * time.Second}))})
	require.NoError(t, b.deliver(t, uuid.NewString())) // trips the circuit
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)
	before := time.Now()
	require.NoError(t, b.deliver(t, uuid.NewString()))
	after := time.Now()
	got := b.reload(t)
	require.Equal(t, task.WaitingRetry, got.Status)
	require.NotNil(t, got.NextRetryAt)
	requireWaited(t, *got.NextRetryAt, before, after, 30*time.Second, "the wait lasts until the circuit half-opens")
	require.Len(t, b.fake.keys, 1, "the open circuit kept the second call from the provider")
}

// TestWaitingForASlotNeverFailsTheTask: a tenant at its concurrency limit
// waits as long as it takes; only provider refusals count against
// SUBMIT_MAX_RETRIES.
func TestWaitingForASlotNeverFailsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, accepted)
	limiter := testLimiter(t)
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: provider.Single(b.fake), Slots: limiter, Journey: journey, Timeout: time.Second})

	// Another task of the tenant holds the tenant's only slot.
	other := stage.GenerationSlots(b.task, "fake", journey)
	other.Holder = uuid.NewString()
	_, err := limiter.Acquire(t.Context(), other)
	require.NoError(t, err)

	require.NoError(t, b.deliver(t, uuid.NewString()))
	for range journey.MaxRetries + 2 {
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
		require.NoError(t, err)
		require.NoError(t, b.deliverScheduled(t))
		require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	}
	require.Empty(t, b.fake.keys, "nothing reached the provider without a slot")

	require.NoError(t, limiter.Release(t.Context(), slots.Lease{Holder: other.Holder, Scopes: []string{other.Scopes[0].Name, other.Scopes[1].Name, other.Scopes[2].Name}, TTL: other.TTL}))
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)
	require.NoError(t, b.deliverScheduled(t))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)

	// A copy of an older delayed resubmit (a replay, say), overtaken by the
	// waits after it, is stale even though the task is due again.
	evs := stagetest.StoredEvents(t, b.pool, catalog.EventSubmitRequested)
	var first task.SubmitRequested
	require.NoError(t, json.Unmarshal(evs[0].Envelope.Payload, &first))
	require.NotZero(t, first.ExpectedVersion)
	_, err = b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'WAITING_RETRY', next_retry_at = now() WHERE task_id = $1`, b.task.ID)
	require.NoError(t, err)
	id := uuid.NewString()
	_, err = b.fn.Handle(t.Context(), stagetest.CloudEvent(t, b.task, id, catalog.EventSubmitRequested, first))
	require.NoError(t, err)
	require.Equal(t, "STALE_NOOP", stagetest.InboxResult(t, b.pool, catalog.GroupSubmit.Name, id))
}

// TestAJobIDAnotherAttemptHoldsNeedsAttention: a provider that hands out
// a job id already recorded for another task's attempt (the simulator of a
// restarted `make run` did) cannot be recorded on any delivery: the task
// goes to NEEDS_ATTENTION with the reason at once, instead of SUBMITTING
// retried for ever, and the other task is left alone.
func TestAJobIDAnotherAttemptHoldsNeedsAttention(t *testing.T) {
	t.Parallel()
	b := setup(t, accepted)
	require.NoError(t, b.deliver(t, uuid.NewString()))
	first := b.reload(t)
	require.Equal(t, task.ProviderRunning, first.Status)

	second := stagetest.NewTask(t, b.pool, nil)
	id := uuid.NewString()
	env, err := envelope.New(envelope.NewParams{EventID: id, EventType: catalog.EventSubmitRequested, Producer: "api",
		AggregateType: task.AggregateType, AggregateID: second.ID.String(), TenantID: second.TenantID.String(),
		Payload: task.SubmitRequested{TaskID: second.ID, Version: 1}})
	require.NoError(t, err)
	ce, err := env.ToCloudEvent()
	require.NoError(t, err)
	_, err = b.fn.Handle(t.Context(), ce)
	require.NoError(t, err, "answered: the task holds the reason")

	got, err := task.Get(t.Context(), b.pool, second.ID)
	require.NoError(t, err)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "db.unique_violation", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "task_attempts_provider_job_key")
	require.Equal(t, "APPLIED", stagetest.InboxResult(t, b.pool, catalog.GroupSubmit.Name, id))
	require.Equal(t, first, b.reload(t), "the task that holds the job is untouched")
}

// TestAnAnswerForAnotherAttemptIsNotApplied: a submit answer that carries
// another request's client request id is not this attempt's job: nothing
// of it is recorded, it is counted, and the attempt's own job is looked
// up as for a lost answer.
func TestAnAnswerForAnotherAttemptIsNotApplied(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{ID: "job-of-another-run", ClientRequestID: "crid-of-another-run", Status: provider.StatusQueued}, nil
	})
	before := stagetest.IdentityMismatches(t, "fake", provider.CheckedAtSubmit)
	require.NoError(t, b.deliver(t, uuid.NewString()))

	got := b.reload(t)
	require.Equal(t, task.Reconciling, got.Status)
	require.Empty(t, got.ProviderJobID)
	var status string
	var jobID *string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT status, provider_job_id FROM task_attempts WHERE task_id = $1`, b.task.ID).Scan(&status, &jobID))
	require.Equal(t, "SUBMIT_UNKNOWN", status)
	require.Nil(t, jobID, "the other attempt's job id is not recorded")
	require.Equal(t, 1, b.pending(t, catalog.EventReconcileDue))
	require.Equal(t, before+1, stagetest.IdentityMismatches(t, "fake", provider.CheckedAtSubmit))
}
