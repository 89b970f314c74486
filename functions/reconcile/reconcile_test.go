package reconcile_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/reconcile"
	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

var journey = config.Journey{PollFirst: 5 * time.Second, PollMax: time.Minute, MaxWait: time.Hour, RetryBase: time.Second,
	RetryMax: time.Minute, MaxRetries: 3, ReconcileAfter: 20 * time.Second, ReconcileRounds: 3,
	SlotsPerTenant: 1, SlotsPerModel: 1, SlotsPerProv: 1, SlotLease: time.Hour}

// lookBack is how far before the attempt the stage asks the provider to
// look (its lookBack).
const lookBack = 5 * time.Minute

type testBundle struct {
	pool    *pgxpool.Pool
	rdb     *redis.Client
	limiter *slots.Limiter
	fake    *fakeProvider
	fn      *stage.Function
	task    task.Task
	attempt attempt
}

// setup makes a RECONCILING task that holds its generation slots, and a
// reconcile function whose provider answers lookups with find.
func setup(t *testing.T, find func(n int) (provider.Job, error)) *testBundle {
	t.Helper()
	return setupWith(t, journey, find)
}

// setupWith is setup with the stage tuned by j.
func setupWith(t *testing.T, j config.Journey, find func(n int) (provider.Job, error)) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.TestSchema(t), rdb: newRedis(t), fake: &fakeProvider{find: find}}
	prefix := "aivedio:test:reconcile:" + uuid.NewString() + ":"
	t.Cleanup(func() { require.NoError(t, deleteKeys(b.rdb, prefix)) })
	b.limiter = slots.New(b.rdb, &slots.Opts{KeyPrefix: prefix})
	b.task, b.attempt = reconcilingTask(t, b.pool)
	_, err := b.limiter.Acquire(t.Context(), stage.GenerationSlots(b.task, providerName, journey))
	require.NoError(t, err)
	b.fn = reconcile.New(reconcile.Params{Pool: b.pool, Providers: provider.Single(b.fake), Slots: b.limiter, Journey: j, Timeout: time.Second})
	return b
}

// deliver hands the function the reconcile event of round (lookups made
// so far) for the task's attempt.
func (b *testBundle) deliver(t *testing.T, eventID string, round int) error {
	t.Helper()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, b.task, eventID, catalog.EventReconcileDue,
		task.ReconcileDue{TaskID: b.task.ID, AttemptID: b.attempt.ID, Round: round, Wait: task.Wait{Reason: "submit answer lost"}}))
	return err
}

// deliverStored hands the function an event a stage wrote to the outbox,
// as the relay and the adapter would.
func (b *testBundle) deliverStored(t *testing.T, fn *stage.Function, ev outbox.Stored) error {
	t.Helper()
	ce, err := ev.Envelope.ToCloudEvent()
	require.NoError(t, err)
	_, err = fn.Handle(t.Context(), ce)
	return err
}

func (b *testBundle) reload(t *testing.T) task.Task {
	t.Helper()
	got, err := task.Get(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	return got
}

func (b *testBundle) slotsHeld(t *testing.T) int {
	t.Helper()
	n, err := b.limiter.InUse(t.Context(), "tenant:"+b.task.TenantID.String())
	require.NoError(t, err)
	return n
}

func unavailable(int) (provider.Job, error) {
	return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
}

func TestJobFoundRunsTheTask(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{ID: "job-9", Status: provider.StatusRunning}, nil
	})
	id := uuid.NewString()
	before := time.Now()
	require.NoError(t, b.deliver(t, id, 0))
	after := time.Now()

	require.Len(t, b.fake.lookups, 1)
	require.Equal(t, b.attempt.ClientRequestID, b.fake.lookups[0].ClientRequestID, "the lookup names the lost submit")
	require.True(t, b.fake.lookups[0].Since.Equal(b.attempt.StartedAt.Add(-lookBack)),
		"looked back from %s, want %s", b.fake.lookups[0].Since, b.attempt.StartedAt.Add(-lookBack))

	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, b.task.Version+1, got.Version)
	require.Equal(t, "job-9", got.ProviderJobID)
	require.NotNil(t, got.NextPollAt)
	requireAfterDelay(t, *got.NextPollAt, journey.PollFirst, before, after)
	require.NotNil(t, got.DeadlineAt)
	requireAfterDelay(t, *got.DeadlineAt, journey.MaxWait, before, after)

	polls := storedEvents(t, b.pool, catalog.EventPollDue)
	require.Len(t, polls, 1)
	require.True(t, polls[0].DeliverAt.Equal(*got.NextPollAt))
	var due task.PollDue
	require.NoError(t, json.Unmarshal(polls[0].Envelope.Payload, &due))
	require.Equal(t, b.task.ID, due.TaskID)
	require.Equal(t, b.attempt.ID, due.AttemptID)
	require.True(t, due.PollAt.Equal(*got.NextPollAt), "the poll is the chain next_poll_at names")

	as := attempts(t, b.pool, b.task.ID)
	require.Len(t, as, 1)
	require.Equal(t, "ACCEPTED", as[0].Status)
	require.Equal(t, "job-9", *as[0].ProviderJobID)
	require.Equal(t, 1, b.slotsHeld(t), "the running job keeps its slots")

	// The same event again is a duplicate: no second lookup, no second poll.
	require.NoError(t, b.deliver(t, id, 0))
	require.Len(t, b.fake.lookups, 1)
	require.Len(t, storedEvents(t, b.pool, catalog.EventPollDue), 1)
}

func TestConfirmedAbsentResubmitsTheSameAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassNotFound, StatusCode: http.StatusNotFound}
	})
	require.NoError(t, b.deliver(t, uuid.NewString(), 0))

	got := b.reload(t)
	require.Equal(t, task.Submitting, got.Status)
	require.Empty(t, got.ProviderJobID)
	as := attempts(t, b.pool, b.task.ID)
	require.Len(t, as, 1, "no new attempt")
	require.Equal(t, attemptRow{ID: b.attempt.ID, Status: "SUBMITTING", IdempotencyKey: b.attempt.IdempotencyKey}, as[0])
	submits := storedEvents(t, b.pool, catalog.EventSubmitRequested)
	require.Len(t, submits, 1)
	var req task.SubmitRequested
	require.NoError(t, json.Unmarshal(submits[0].Envelope.Payload, &req))
	require.Equal(t, task.SubmitRequested{TaskID: b.task.ID, Version: got.Version}, req)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventPollDue))

	// The submit stage resumes that attempt: the same idempotency key, so
	// a job the lookup missed cannot be started twice.
	sub := submit.New(submit.Params{Pool: b.pool, Providers: provider.Single(b.fake), Journey: journey, Timeout: time.Second})
	require.NoError(t, b.deliverStored(t, sub, submits[0]))
	require.Len(t, b.fake.submits, 1)
	require.Equal(t, b.attempt.IdempotencyKey, b.fake.submits[0].IdempotencyKey)
	require.Equal(t, b.attempt.ClientRequestID, b.fake.submits[0].ClientRequestID)
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)
}

func TestUnansweredLookupsNeedAttention(t *testing.T) {
	t.Parallel()
	b := setup(t, unavailable)
	before := time.Now()
	require.NoError(t, b.deliver(t, uuid.NewString(), 0))
	after := time.Now()
	for round := 1; round < journey.ReconcileRounds; round++ {
		got := b.reload(t)
		require.Equal(t, task.Reconciling, got.Status, "round %d", round)
		require.Equal(t, b.task.Version+int64(round), got.Version, "a lookup tried again later touches the task (no transition), so the scanner sees the chain alive")
		dues := storedEvents(t, b.pool, catalog.EventReconcileDue)
		require.Len(t, dues, round)
		next := dues[round-1]
		var due task.ReconcileDue
		require.NoError(t, json.Unmarshal(next.Envelope.Payload, &due))
		require.Equal(t, round, due.Round)
		require.Equal(t, b.attempt.ID, due.AttemptID)
		require.Equal(t, task.Wait{ExpectedStatus: task.Reconciling, ExpectedVersion: got.Version, NotBefore: next.DeliverAt.UTC(),
			Reason: "submit answer lost", RetryAttempt: round}, due.Wait, "the delayed look carries its wait (seed 7.12.1)")
		requireAfterDelay(t, next.DeliverAt, journey.ReconcileAfter, before, after)
		before = time.Now()
		require.NoError(t, b.deliverStored(t, b.fn, next))
		after = time.Now()
	}

	got := b.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "reconcile.submit_unknown", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "a person decides")
	require.Len(t, b.fake.lookups, journey.ReconcileRounds)
	require.Len(t, storedEvents(t, b.pool, catalog.EventReconcileDue), journey.ReconcileRounds-1, "no lookup after the last round")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSubmitRequested), "never resubmitted blind")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSettleRequested), "the reservation waits for the person")
	require.Equal(t, "SUBMIT_UNKNOWN", attempts(t, b.pool, b.task.ID)[0].Status)
	require.Zero(t, b.slotsHeld(t), "a task no job runs for frees its slots")
}

// TestALookupTheProviderCannotDoNeedsAttentionAtOnce: a provider without
// any way to find a job by our request id (Runway) cannot answer a later
// round either; the task goes to a person on the first, never resubmitted.
func TestALookupTheProviderCannotDoNeedsAttentionAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassRejected, Code: provider.CodeLookupUnsupported, Message: "no task listing"}
	})
	require.NoError(t, b.deliver(t, uuid.NewString(), 0))
	got := b.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "reconcile.submit_unknown", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "offers no way to look its job up")
	require.Len(t, b.fake.lookups, 1)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventReconcileDue), "no second round")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSubmitRequested), "never resubmitted blind")
	require.Zero(t, b.slotsHeld(t))
}

// TestLookOfAnotherVersionDoesNothing: a delayed look whose wait expects
// the task at a version it has left is a stale no-op: no lookup.
func TestLookOfAnotherVersionDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, unavailable)
	id := uuid.NewString()
	_, err := b.fn.Handle(t.Context(), stagetest.CloudEvent(t, b.task, id, catalog.EventReconcileDue,
		task.ReconcileDue{TaskID: b.task.ID, AttemptID: b.attempt.ID, Round: 1, Wait: task.Wait{
			ExpectedStatus: task.Reconciling, ExpectedVersion: b.task.Version + 1, Reason: "submit answer lost", RetryAttempt: 1}}))
	require.NoError(t, err)
	require.Empty(t, b.fake.lookups, "a stale look asks the provider nothing")
	require.Equal(t, "STALE_NOOP", stagetest.InboxResult(t, b.pool, catalog.GroupReconcile.Name, id))
}

func TestLookupOfSettledAttemptDoesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, unavailable)
	// A reconcile event for an attempt that is no longer unknown.
	_, err := b.pool.Exec(t.Context(), `UPDATE task_attempts SET status = 'ACCEPTED' WHERE attempt_id = $1`, b.attempt.ID)
	require.NoError(t, err)
	id := uuid.NewString()
	require.NoError(t, b.deliver(t, id, 0))
	require.Empty(t, b.fake.lookups)
	require.Equal(t, b.task.Version, b.reload(t).Version)
	require.Equal(t, "STALE_NOOP", inboxResult(t, b.pool, catalog.GroupReconcile.Name, id))
}

func TestAnotherTenantsReconcileIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, unavailable)
	other := b.task
	other.TenantID = uuid.New()
	_, err := b.fn.Handle(t.Context(), cloudEvent(t, other, uuid.NewString(), catalog.EventReconcileDue,
		task.ReconcileDue{TaskID: b.task.ID, AttemptID: b.attempt.ID, Wait: task.Wait{Reason: "submit answer lost"}}))
	require.Equal(t, http.StatusUnprocessableEntity, statusOf(t, err))
	require.Empty(t, b.fake.lookups)
}

func outageAnswer(int) (provider.Job, error) {
	return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusServiceUnavailable}
}

// TestLookupsMetByAnOutageAreNotRounds: lookups a provider outage answers
// (503, 429) say nothing about the job, so more of them than
// RECONCILE_MAX_ROUNDS do not hand the task to a person; they come further
// apart (doubling, capped under the scanner's patience), each touching the
// task, and the lookup that gets an answer finds the job.
func TestLookupsMetByAnOutageAreNotRounds(t *testing.T) {
	t.Parallel()
	j := journey
	j.ReconcileOutageHorizon = time.Hour
	outages := 2 * j.ReconcileRounds
	b := setupWith(t, j, func(n int) (provider.Job, error) {
		switch {
		case n <= outages && n%2 == 0:
			return provider.Job{}, &provider.Error{Class: provider.ClassRateLimited, StatusCode: http.StatusTooManyRequests}
		case n <= outages:
			return outageAnswer(n)
		}
		return provider.Job{ID: "job-7", Status: provider.StatusRunning}, nil
	})
	require.NoError(t, b.deliver(t, uuid.NewString(), 0))
	for n := 1; n <= outages; n++ {
		got := b.reload(t)
		require.Equal(t, task.Reconciling, got.Status, "after outage %d", n)
		require.Equal(t, b.task.Version+int64(n), got.Version, "each outage lookup touches the task, so the scanner sees the chain alive")
		dues := storedEvents(t, b.pool, catalog.EventReconcileDue)
		require.Len(t, dues, n)
		var due task.ReconcileDue
		require.NoError(t, json.Unmarshal(dues[n-1].Envelope.Payload, &due))
		require.Zero(t, due.Round, "an outage is not a round")
		require.Equal(t, n, due.Outages)
		require.Equal(t, got.Version, due.ExpectedVersion)
		want := min(j.ReconcileAfter<<(n-1), j.ReconcileAfter*time.Duration(j.ReconcileRounds))
		gap := dues[n-1].DeliverAt.Sub(dues[n-1].CreatedAt)
		require.InDelta(t, want.Seconds(), gap.Seconds(), 1, "outage %d: looked again after %s, want %s", n, gap, want)
		require.NoError(t, b.deliverStored(t, b.fn, dues[n-1]))
	}
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "job-7", got.ProviderJobID)
	require.Len(t, b.fake.lookups, outages+1)
	require.Empty(t, storedEvents(t, b.pool, catalog.EventSubmitRequested), "never resubmitted blind")
}

// TestAnOutageLongerThanTheHorizonNeedsAttention: past
// RECONCILE_OUTAGE_HORIZON after the submit, a lookup met by an outage
// hands the task to a person, saying so.
func TestAnOutageLongerThanTheHorizonNeedsAttention(t *testing.T) {
	t.Parallel()
	j := journey
	j.ReconcileOutageHorizon = time.Millisecond
	b := setupWith(t, j, outageAnswer)
	require.NoError(t, b.deliver(t, uuid.NewString(), 0))
	got := b.reload(t)
	require.Equal(t, task.NeedsAttention, got.Status)
	require.Equal(t, "reconcile.submit_unknown", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "answered none of the lookups")
	require.Contains(t, got.ErrorMessage, "adapter tasks resolve")
	require.Empty(t, storedEvents(t, b.pool, catalog.EventReconcileDue))
	require.Zero(t, b.slotsHeld(t))
}
