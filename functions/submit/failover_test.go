package submit_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/attempt"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/task"
)

// namedFake is a fakeProvider under a name of its own, so that two can
// share one set.
type namedFake struct {
	*fakeProvider
	name string
}

func (n namedFake) Name() string { return n.name }

// routed is a bundle whose task's model goes to first, then second; each
// sits behind a breaker that one outage opens for a minute.
type routed struct {
	*testBundle
	first, second *fakeProvider
	firstBreaker  provider.Client
}

func setupRouted(t *testing.T, first, second func(n int) (provider.Job, error)) *routed {
	t.Helper()
	b := setup(t, first)
	r := &routed{testBundle: b, first: b.fake, second: &fakeProvider{answer: second}}
	breaker := provider.BreakerSettings{Failures: 1, Open: time.Minute}
	r.firstBreaker = provider.WithBreaker(namedFake{r.first, "one"}, breaker)
	set, err := provider.NewSet([]provider.Client{r.firstBreaker, provider.WithBreaker(namedFake{r.second, "two"}, breaker)},
		provider.Routes{b.task.Model: {{Provider: "one", Model: "model-at-one"}, {Provider: "two", Model: "model-at-two"}}},
		[]string{b.task.Model})
	require.NoError(t, err)
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: set, Journey: journey, Timeout: time.Second})
	return r
}

func (r *routed) attempts(t *testing.T) []attempt.Attempt {
	t.Helper()
	as, err := attempt.List(t.Context(), r.pool, r.task.ID)
	require.NoError(t, err)
	return as
}

// due makes the task's delayed resubmit due now and delivers it.
func (r *routed) resubmit(t *testing.T) {
	t.Helper()
	_, err := r.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)
	require.NoError(t, r.deliverScheduled(t))
}

func TestANewAttemptGoesToTheFirstProviderWithAClosedCircuit(t *testing.T) {
	t.Parallel()
	down := &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
	r := setupRouted(t, func(int) (provider.Job, error) { return provider.Job{}, down }, accepted)
	// One outage opens the first provider's circuit.
	_, err := r.firstBreaker.Submit(t.Context(), provider.SubmitRequest{})
	require.Error(t, err)

	require.NoError(t, r.deliver(t, uuid.NewString()))
	got := r.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "two", got.Provider)
	as := r.attempts(t)
	require.Len(t, as, 1, "a task never tried at the first provider just goes to the second")
	require.Equal(t, "two", as[0].Provider)
	require.Equal(t, "model-at-two", as[0].Model, "the model goes by the second provider's name for it")
	require.Len(t, r.first.keys, 1, "only the call that opened the circuit")
	require.Len(t, r.second.keys, 1)
}

func TestARefusedAttemptFailsOverWhenItsProviderIsDown(t *testing.T) {
	t.Parallel()
	// A 503 is a refusal that made nothing, and it opens the circuit.
	r := setupRouted(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusServiceUnavailable}
	}, accepted)
	require.NoError(t, r.deliver(t, uuid.NewString()))
	require.Equal(t, task.WaitingRetry, r.reload(t).Status)
	as := r.attempts(t)
	require.Len(t, as, 1)
	require.Equal(t, 1, as[0].Sends)
	require.True(t, as[0].NoRemoteJob(), "every send refused outright: %+v", as[0])

	r.resubmit(t)
	got := r.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "two", got.Provider)
	as = r.attempts(t)
	require.Len(t, as, 2)
	require.Equal(t, attempt.Abandoned, as[0].Status, "the first attempt is left, on record")
	require.Equal(t, "one", as[0].Provider)
	require.Equal(t, "two", as[1].Provider)
	require.NotEqual(t, as[0].IdempotencyKey, as[1].IdempotencyKey)
	require.Len(t, r.first.keys, 1, "the open circuit kept the retry from the first provider")
	require.Len(t, r.second.keys, 1)
}

// TestAnAttemptThatMayHaveAJobNeverFailsOver: a 502 may come after the
// provider created the job; with its circuit open the task waits for that
// provider rather than pay a second one.
func TestAnAttemptThatMayHaveAJobNeverFailsOver(t *testing.T) {
	t.Parallel()
	r := setupRouted(t, func(n int) (provider.Job, error) {
		if n == 1 {
			return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
		}
		return accepted(n)
	}, accepted)
	require.NoError(t, r.deliver(t, uuid.NewString()))
	for range 2 {
		r.resubmit(t)
		require.Equal(t, task.WaitingRetry, r.reload(t).Status)
	}
	require.Empty(t, r.second.keys, "nothing went to the second provider")
	as := r.attempts(t)
	require.Len(t, as, 1)
	require.False(t, as[0].NoRemoteJob())
	require.Equal(t, attempt.Submitting, as[0].Status)
}

// TestALostAnswerIsNotFailedOver: the answer lost, the attempt goes to the
// reconciler, not to another provider.
func TestALostAnswerIsNotFailedOver(t *testing.T) {
	t.Parallel()
	r := setupRouted(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassTimeoutUnknown, Message: "answer lost"}
	}, accepted)
	require.NoError(t, r.deliver(t, uuid.NewString()))
	require.Equal(t, task.Reconciling, r.reload(t).Status)
	require.Empty(t, r.second.keys)
	require.Equal(t, 1, r.pending(t, catalog.EventReconcileDue))
}

// TestAConfirmedAbsentJobMayFailOver: once the reconciler confirmed that
// the lost submit made no job (and reopened the attempt), an outage of its
// provider moves the task on.
func TestAConfirmedAbsentJobMayFailOver(t *testing.T) {
	t.Parallel()
	r := setupRouted(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassTimeoutUnknown, Message: "answer lost"}
	}, accepted)
	require.NoError(t, r.deliver(t, uuid.NewString()))
	lost := r.attempts(t)[0]
	require.False(t, lost.NoRemoteJob())
	// What the reconciler does when the lookup finds nothing.
	require.NoError(t, attempt.Reopen(t.Context(), r.pool, lost.ID))
	_, err := r.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'WAITING_RETRY', next_retry_at = now(), version = version + 1`)
	require.NoError(t, err)
	_, err = r.firstBreaker.Submit(t.Context(), provider.SubmitRequest{}) // the first provider goes down
	require.Error(t, err)
	_, err = r.fn.Handle(t.Context(), stagetest.CloudEvent(t, r.task, uuid.NewString(), catalog.EventSubmitRequested,
		task.SubmitRequested{TaskID: r.task.ID}))
	require.NoError(t, err)
	got := r.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "two", got.Provider)
	as := r.attempts(t)
	require.Equal(t, attempt.Abandoned, as[0].Status)
	require.Equal(t, "two", as[1].Provider)
}

func TestAContentRejectionFailsWithoutRetryOrFailover(t *testing.T) {
	t.Parallel()
	r := setupRouted(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassContentRejected, StatusCode: 400, Code: "SAFETY.INPUT.TEXT",
			Message: "the prompt was flagged"}
	}, accepted)
	require.NoError(t, r.deliver(t, uuid.NewString()))
	got := r.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, provider.CodeContentRejected, got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "the prompt was flagged")
	require.Equal(t, 1, r.pending(t, catalog.EventSettleRequested), "the reservation is released")
	require.Zero(t, r.pending(t, catalog.EventSubmitRequested), "no retry")
	require.Empty(t, r.second.keys, "not sent to another provider to get around the review")
	as := r.attempts(t)
	require.Len(t, as, 1)
	require.Equal(t, attempt.Rejected, as[0].Status)
}

// TestNoProviderCanServeTheRequest: every route unable to serve it (the
// Capable check) fails the task at once, saying why.
func TestNoProviderCanServeTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, accepted)
	set, err := provider.NewSet([]provider.Client{picky{namedFake{b.fake, "picky"}}},
		provider.Routes{b.task.Model: {{Provider: "picky", Model: "m"}}}, nil)
	require.NoError(t, err)
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: set, Journey: journey, Timeout: time.Second})
	require.NoError(t, b.deliver(t, uuid.NewString()))
	got := b.reload(t)
	require.Equal(t, task.Failed, got.Status)
	require.Equal(t, "provider.unsupported_request", got.ErrorCode)
	require.Contains(t, got.ErrorMessage, "picky: provider rejected: resolution 640x360 is not offered")
	require.Empty(t, b.fake.keys)
}

// picky supports nothing.
type picky struct{ namedFake }

func (picky) Supports(req provider.SubmitRequest) error {
	return &provider.Error{Class: provider.ClassRejected, Message: "resolution " + req.Resolution + " is not offered"}
}

// TestAProviderWithoutKeysIsNeverSentASubmitTwice: at a provider that does
// not dedup by key, a 502 (the job may exist) and a send left unanswered
// by a crash are looked up, never sent again.
func TestAProviderWithoutKeysIsNeverSentASubmitTwice(t *testing.T) {
	t.Parallel()
	t.Run("a 502", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(int) (provider.Job, error) {
			return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusBadGateway}
		})
		b.fake.noDedup = true
		require.NoError(t, b.deliver(t, uuid.NewString()))
		require.Equal(t, task.Reconciling, b.reload(t).Status)
		require.Equal(t, 1, b.pending(t, catalog.EventReconcileDue))
		require.Len(t, b.fake.keys, 1)
	})
	t.Run("a 503 is refused outright and retried", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(n int) (provider.Job, error) {
			if n == 1 {
				return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusServiceUnavailable}
			}
			return accepted(n)
		})
		b.fake.noDedup = true
		require.NoError(t, b.deliver(t, uuid.NewString()))
		require.Equal(t, task.WaitingRetry, b.reload(t).Status)
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
		require.NoError(t, err)
		require.NoError(t, b.deliverScheduled(t))
		require.Equal(t, task.ProviderRunning, b.reload(t).Status)
	})
	t.Run("a send a crash left unanswered", func(t *testing.T) {
		t.Parallel()
		b := setup(t, accepted)
		b.fake.noDedup = true
		// What a submit that died mid-call leaves: SUBMITTING, one send.
		require.NoError(t, b.deliver(t, uuid.NewString()))
		_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET status = 'SUBMITTING', provider_job_id = NULL, version = version + 1`)
		require.NoError(t, err)
		_, err = b.pool.Exec(t.Context(), `UPDATE task_attempts SET status = 'SUBMITTING', provider_job_id = NULL`)
		require.NoError(t, err)
		b.task = b.reload(t)
		require.NoError(t, b.deliver(t, uuid.NewString()))
		require.Equal(t, task.Reconciling, b.reload(t).Status)
		require.Len(t, b.fake.keys, 1, "not sent again")
	})
}

// halfOpenFirst routes b's task to b.fake as "one", then to a second
// provider "two", each behind a breaker that one outage opens for 50 ms,
// and delivers the task's submit: the first answers it with an outage.
func halfOpenFirst(t *testing.T, b *testBundle) (first provider.Client, second *fakeProvider) {
	t.Helper()
	second = &fakeProvider{answer: accepted}
	breaker := provider.BreakerSettings{Failures: 1, Open: 50 * time.Millisecond}
	first = provider.WithBreaker(namedFake{b.fake, "one"}, breaker)
	set, err := provider.NewSet([]provider.Client{first, provider.WithBreaker(namedFake{second, "two"}, breaker)},
		provider.Routes{b.task.Model: {{Provider: "one", Model: "m1"}, {Provider: "two", Model: "m2"}}}, nil)
	require.NoError(t, err)
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: set, Journey: journey, Timeout: time.Second})
	require.NoError(t, b.deliver(t, uuid.NewString())) // a 503 opens the first circuit
	return first, second
}

// TestAHalfOpenCircuitDoesNotHoldARefusedAttempt: the first provider's
// circuit half-opens for one trial, but while the second is healthy a task
// whose attempt made no job goes there rather than wait on the trial.
func TestAHalfOpenCircuitDoesNotHoldARefusedAttempt(t *testing.T) {
	t.Parallel()
	b := setup(t, func(int) (provider.Job, error) {
		return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusServiceUnavailable}
	})
	first, second := halfOpenFirst(t, b)
	require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	require.Eventually(t, func() bool { return provider.BreakerState(first) == "half-open" }, 5*time.Second, 10*time.Millisecond)

	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now()`)
	require.NoError(t, err)
	require.NoError(t, b.deliverScheduled(t))
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "two", got.Provider)
	require.Len(t, b.fake.keys, 1, "no trial call spent on this task")
	require.Len(t, second.keys, 1)
}

// blockingProvider answers Submit only once release is closed.
type blockingProvider struct {
	*fakeProvider
	entered chan struct{}
	release chan struct{}
}

func (b blockingProvider) Submit(ctx context.Context, req provider.SubmitRequest) (provider.Job, error) {
	close(b.entered)
	<-b.release
	return b.fakeProvider.Submit(ctx, req)
}

// TestALateAnswerOfASendTakenForLostIsKept: at a provider without keys, a
// redelivery during a slow submit takes the send for lost (RECONCILING);
// when the slow submit's answer comes, its job is recorded, not dropped:
// nothing else could find it.
func TestALateAnswerOfASendTakenForLostIsKept(t *testing.T) {
	t.Parallel()
	b := setup(t, accepted)
	b.fake.noDedup = true
	slow := blockingProvider{fakeProvider: b.fake, entered: make(chan struct{}), release: make(chan struct{})}
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: provider.Single(slow), Journey: journey, Timeout: 10 * time.Second})

	first := make(chan error, 1)
	go func() { first <- b.deliver(t, uuid.NewString()) }()
	<-slow.entered
	b.task = b.reload(t)
	require.Equal(t, task.Submitting, b.task.Status)
	require.NoError(t, b.deliver(t, uuid.NewString()), "the redelivery")
	require.Equal(t, task.Reconciling, b.reload(t).Status)

	close(slow.release)
	require.NoError(t, <-first)
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "job-1", got.ProviderJobID)
	require.Equal(t, attempt.Accepted, onlyAttempt(t, b).Status)
	require.Len(t, b.fake.keys, 1)
}

func onlyAttempt(t *testing.T, b *testBundle) attempt.Attempt {
	t.Helper()
	as, err := attempt.List(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	require.Len(t, as, 1)
	return as[0]
}

// TestThePreferredProviderGetsItsTrafficBack: once the first provider's
// circuit half-opens, a new task makes its trial call there rather than
// go to the healthy second provider, and the answer closes the circuit:
// the task refused before goes back to it too. Behind a closed second
// provider, a half-open circuit that waited its turn would never be tried
// again.
func TestThePreferredProviderGetsItsTrafficBack(t *testing.T) {
	t.Parallel()
	b := setup(t, func(n int) (provider.Job, error) {
		if n == 1 {
			return provider.Job{}, &provider.Error{Class: provider.ClassUnavailable, StatusCode: http.StatusServiceUnavailable}
		}
		return provider.Job{ID: fmt.Sprintf("job-%d", n), Status: provider.StatusQueued}, nil
	})
	first, second := halfOpenFirst(t, b)
	refused := b.task
	require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	require.Eventually(t, func() bool { return provider.BreakerState(first) == "half-open" }, 5*time.Second, 10*time.Millisecond)

	b.task = stagetest.NewTask(t, b.pool, nil)
	require.NoError(t, b.deliver(t, uuid.NewString()))
	got := b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "one", got.Provider, "the trial call goes to the preferred provider")
	require.Equal(t, "closed", provider.BreakerState(first), "its answer closed the circuit")

	b.task = refused
	_, err := b.pool.Exec(t.Context(), `UPDATE generation_tasks SET next_retry_at = now() WHERE task_id = $1`, refused.ID)
	require.NoError(t, err)
	evs := stagetest.StoredEvents(t, b.pool, catalog.EventSubmitRequested)
	var resubmit *outbox.Stored
	for i := range evs {
		if evs[i].Envelope.AggregateID == refused.ID.String() {
			resubmit = &evs[i]
		}
	}
	require.NotNil(t, resubmit, "the refused task's resubmit")
	ce, err := resubmit.Envelope.ToCloudEvent()
	require.NoError(t, err)
	_, err = b.fn.Handle(t.Context(), ce)
	require.NoError(t, err)
	got = b.reload(t)
	require.Equal(t, task.ProviderRunning, got.Status)
	require.Equal(t, "one", got.Provider, "the task refused there before goes back to it too")
	require.Empty(t, second.keys, "nothing went to the second provider")
}
