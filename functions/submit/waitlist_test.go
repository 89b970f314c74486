package submit_test

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions/stage"
	"github.com/aivedio/pipeline/functions/stage/stagetest"
	"github.com/aivedio/pipeline/functions/submit"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/provider"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/waitlist"
)

// waitlistSetup is setup with slots and a wait list, and a fallback timer
// no test waits for.
func waitlistSetup(t *testing.T) (*testBundle, *slots.Limiter, *waitlist.List, config.Journey) {
	b := setup(t, accepted)
	limiter := testLimiter(t)
	j := journey
	j.WaitFallback = 10 * time.Minute
	list := waitlist.New(b.pool, limiter, func(t task.Task, p string) slots.AcquireParams { return stage.GenerationSlots(t, p, j) }, "waitlist", nil)
	b.fn = submit.New(submit.Params{Pool: b.pool, Providers: provider.Single(b.fake), Slots: limiter, Waitlist: list, Journey: j, Timeout: time.Second})
	return b, limiter, list, j
}

// A submit that finds its slots full joins the wait list and waits on the
// fallback timer only; the release of the slot wakes it with an immediate
// submit, which finds the slot held for it and leaves the list.
func TestSlotWaitJoinsTheWaitListAndTheReleaseWakesIt(t *testing.T) {
	t.Parallel()
	b, limiter, list, j := waitlistSetup(t)

	// Another task of the tenant runs a job and holds the tenant's slot.
	other := stage.GenerationSlots(b.task, "fake", j)
	other.Holder = uuid.NewString()
	_, err := limiter.Acquire(t.Context(), other)
	require.NoError(t, err)

	before := time.Now()
	require.NoError(t, b.deliver(t, uuid.NewString()))
	waiting := b.reload(t)
	require.Equal(t, task.WaitingRetry, waiting.Status)
	require.NotNil(t, waiting.NextRetryAt)
	require.True(t, waiting.NextRetryAt.After(before.Add(j.WaitFallback)), "the timer is only the fallback: due %s", waiting.NextRetryAt)
	pos, err := waitlist.Position(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	require.Equal(t, &waitlist.Queue{Position: 1, Reason: waitlist.ReasonTenantLimit, Scope: "tenant:" + b.task.TenantID.String(), ETASeconds: 1}, pos)

	// The other job ends: its slots go to the waiter at once.
	stage.ReleaseSlots(t.Context(), limiter, list, other, slog.New(slog.DiscardHandler))
	woken := b.reload(t)
	require.Equal(t, task.WaitingRetry, woken.Status)
	require.True(t, task.SubmitStarts(woken, time.Now()), "woken: due now")

	require.NoError(t, b.deliverScheduled(t))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)
	require.Len(t, b.fake.keys, 1)
	var left int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM slot_waits`).Scan(&left))
	require.Zero(t, left, "the task left the wait list when it was submitted")
	n, err := limiter.InUse(t.Context(), "tenant:"+b.task.TenantID.String())
	require.NoError(t, err)
	require.Equal(t, 1, n, "the task holds the slot it was handed, once")
	require.Len(t, stagetest.StoredEvents(t, b.pool, catalog.EventSubmitRequested), 2, "the fallback and the wake-up")
}

// A paused provider holds new work on the wait list with the reason
// "paused", without a call and without counting a refusal; resuming wakes
// it and it is submitted.
func TestPausedProviderHoldsWorkUntilResumed(t *testing.T) {
	t.Parallel()
	b, _, list, _ := waitlistSetup(t)
	d := waitlist.Decision{Ticket: "OPS-1", Operator: "alice", Reason: "provider incident"}
	_, err := waitlist.PauseWork(t.Context(), b.pool, "provider:fake", d)
	require.NoError(t, err)

	require.NoError(t, b.deliver(t, uuid.NewString()))
	require.Equal(t, task.WaitingRetry, b.reload(t).Status)
	require.Empty(t, b.fake.keys, "nothing reached a paused provider")
	evs := stagetest.StoredEvents(t, b.pool, catalog.EventSubmitRequested)
	require.Len(t, evs, 1)
	var fallback task.SubmitRequested
	require.NoError(t, json.Unmarshal(evs[0].Envelope.Payload, &fallback))
	require.Zero(t, fallback.Refusals, "a pause is no refusal: it never counts against SUBMIT_MAX_RETRIES")
	pos, err := waitlist.Position(t.Context(), b.pool, b.task.ID)
	require.NoError(t, err)
	require.NotNil(t, pos)
	require.Equal(t, waitlist.ReasonPaused, pos.Reason)
	woken, err := list.WakeIdle(t.Context(), pos.Scope, nil)
	require.NoError(t, err)
	require.Equal(t, uuid.Nil, woken, "room in the slots does not wake paused work")

	p, n, err := list.Resume(t.Context(), "provider:fake", waitlist.Decision{Ticket: "OPS-1", Operator: "bob", Reason: "over"})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "bob", *p.ResumeOperator)
	require.NoError(t, b.deliverScheduled(t))
	require.Equal(t, task.ProviderRunning, b.reload(t).Status)
	require.Len(t, b.fake.keys, 1)
}
