package waitlist_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/dbtest"
	"github.com/aivedio/pipeline/shared/servicetest"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
	"github.com/aivedio/pipeline/shared/tenant"
	"github.com/aivedio/pipeline/shared/waitlist"
)

const (
	model    = "model:m1"
	provider = "p1"
)

type bundle struct {
	pool    *pgxpool.Pool
	redis   *redis.Client
	limiter *slots.Limiter
	list    *waitlist.List
	prefix  string
}

// setup gives the test its own schema and its own slot keys; the model
// scope admits one job, a tenant's scope tenantLimit.
func setup(t *testing.T, p *waitlist.Params, tenantLimit int) *bundle {
	t.Helper()
	opts, err := redis.ParseURL(servicetest.Env(t, "Redis", "REDIS_URL"))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	b := &bundle{pool: dbtest.TestSchema(t), redis: rdb, prefix: "aivedio:waitlist:test:" + uuid.NewString() + ":"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := rdb.Scan(ctx, 0, b.prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			_ = rdb.Del(ctx, iter.Val()).Err()
		}
	})
	b.limiter = slots.New(rdb, &slots.Opts{KeyPrefix: b.prefix})
	b.list = waitlist.New(b.pool, b.limiter, func(t task.Task, provider string) slots.AcquireParams {
		return slots.AcquireParams{Holder: t.ID.String(), TTL: time.Hour, Scopes: []slots.Scope{
			{Name: "tenant:" + t.TenantID.String(), Limit: tenantLimit},
			{Name: model, Limit: 1},
		}}
	}, "waitlist", p)
	return b
}

func (b *bundle) tenant(t *testing.T, priority int) uuid.UUID {
	t.Helper()
	var c tenant.Created
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		var err error
		c, err = tenant.Create(t.Context(), tx, tenant.NewTenant{Name: "t", Priority: priority, Credits: 1000}, tenant.RoleTenant)
		return err
	}))
	return c.TenantID
}

var api = task.Origin{Producer: "api"}

// waiting creates a task of tenantID and puts it on the wait list for
// the model scope, as its submit does: WAITING_RETRY and joined in one
// transaction.
func (b *bundle) waiting(t *testing.T, tenantID uuid.UUID) task.Task {
	t.Helper()
	ctx := t.Context()
	var out task.Task
	hash := sha256.Sum256([]byte(uuid.NewString()))
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		created, _, err := task.Create(ctx, tx, api, task.New{TenantID: tenantID, IdempotencyKey: uuid.NewString(), RequestHash: hash[:],
			Model: "m1", Prompt: "a cat", DurationSeconds: 4, Resolution: "1280x720"})
		if err != nil {
			return err
		}
		later := time.Now().Add(time.Hour).UTC()
		if out, err = task.Apply(ctx, tx, api, created, task.Transition{To: task.WaitingRetry, Reason: "no free slot",
			Set: task.Fields{NextRetryAt: &later}}); err != nil {
			return err
		}
		return b.list.Join(ctx, tx, out, waitlist.Wait{Scope: model, Provider: provider, Reason: "no free slot"})
	}))
	return out
}

// hold takes the model's one slot for a running job and returns its lease.
func (b *bundle) hold(t *testing.T, holder string) slots.Lease {
	t.Helper()
	lease, err := b.limiter.Acquire(t.Context(), slots.AcquireParams{Holder: holder, TTL: time.Hour, Scopes: []slots.Scope{{Name: model, Limit: 1}}})
	require.NoError(t, err)
	return lease
}

// release ends the job that holds lease and returns the task woken.
func (b *bundle) release(t *testing.T, lease slots.Lease) uuid.UUID {
	t.Helper()
	woken, err := b.list.Release(t.Context(), lease)
	require.NoError(t, err)
	return woken
}

// leaseOf is the lease a woken task holds.
func leaseOf(t task.Task) slots.Lease {
	return slots.Lease{Holder: t.ID.String(), Scopes: []string{"tenant:" + t.TenantID.String(), model}, TTL: time.Hour}
}

// order releases the model's slot again and again and returns the tasks
// in the order they were woken.
func (b *bundle) order(t *testing.T, first slots.Lease, byID map[uuid.UUID]task.Task, n int) []uuid.UUID {
	t.Helper()
	var woken []uuid.UUID
	lease := first
	for range n {
		id := b.release(t, lease)
		require.NotEqual(t, uuid.Nil, id, "a waiter is woken while %d wait", n-len(woken))
		woken = append(woken, id)
		lease = leaseOf(byID[id])
	}
	return woken
}

func TestHigherPriorityIsWokenFirst(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	low, high := b.tenant(t, 1), b.tenant(t, 9)
	running := b.hold(t, "job")
	l1 := b.waiting(t, low)
	l2 := b.waiting(t, low)
	h1 := b.waiting(t, high)
	byID := map[uuid.UUID]task.Task{l1.ID: l1, l2.ID: l2, h1.ID: h1}

	require.Equal(t, []uuid.UUID{h1.ID, l1.ID, l2.ID}, b.order(t, running, byID, 3))
	require.Equal(t, uuid.Nil, b.release(t, leaseOf(l2)), "nobody is left to wake")
}

// A low-priority task that has waited longer than its priority's head
// start passes a newer high-priority one: no starvation.
func TestAgingPassesNewerHigherPriority(t *testing.T) {
	t.Parallel()
	step := 20 * time.Millisecond
	b := setup(t, &waitlist.Params{PriorityStep: step}, 10)
	low, high := b.tenant(t, 1), b.tenant(t, 3)
	running := b.hold(t, "job")
	old := b.waiting(t, low)
	// Past the head start of 2 points: wait on the database's clock, which
	// ranks are made by.
	headStart := 2 * step
	require.Eventually(t, func() bool {
		var waited time.Duration
		err := b.pool.QueryRow(t.Context(), `SELECT clock_timestamp() - joined_at FROM slot_waits WHERE task_id = $1`, old.ID).Scan(&waited)
		return err == nil && waited > headStart+b.interval(t)
	}, 10*time.Second, 5*time.Millisecond)
	newer := b.waiting(t, high)

	byID := map[uuid.UUID]task.Task{old.ID: old, newer.ID: newer}
	require.Equal(t, []uuid.UUID{old.ID, newer.ID}, b.order(t, running, byID, 2))
}

// interval is the model scope's grant interval now.
func (b *bundle) interval(t *testing.T) time.Duration {
	var ms float64
	err := b.pool.QueryRow(t.Context(), `SELECT coalesce((SELECT 1 / sum(1 / grant_interval_ms) FROM slot_wait_scopes WHERE scope = $1), $2)`,
		model, float64(waitlist.DefaultGrantInterval.Milliseconds())).Scan(&ms)
	require.NoError(t, err)
	return time.Duration(ms * float64(time.Millisecond))
}

// A tenant's burst queues behind itself: another tenant of the same
// priority that comes later is served after about one grant, not after
// the whole burst.
func TestBurstDoesNotHoldBackAnotherTenant(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 100)
	bursting, other := b.tenant(t, 1), b.tenant(t, 1)
	running := b.hold(t, "job")
	byID := map[uuid.UUID]task.Task{}
	for range 20 {
		w := b.waiting(t, bursting)
		byID[w.ID] = w
	}
	late := b.waiting(t, other)
	byID[late.ID] = late

	woken := b.order(t, running, byID, 3)
	require.Contains(t, woken[:2], late.ID, "the other tenant's first task is among the first two woken, not after 20")
}

func TestWokenTaskHoldsTheSlotAndIsDue(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	ten := b.tenant(t, 1)
	running := b.hold(t, "job")
	w := b.waiting(t, ten)
	require.Equal(t, w.ID, b.release(t, running))

	// A newcomer finds the scope full: the slot went to the waiter.
	_, err := b.limiter.Acquire(t.Context(), slots.AcquireParams{Holder: "newcomer", TTL: time.Hour, Scopes: []slots.Scope{{Name: model, Limit: 1}}})
	require.ErrorIs(t, err, slots.ErrNoSlot)
	n, err := b.limiter.InUse(t.Context(), model)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	// Its submit acquiring again renews what it holds.
	_, err = b.limiter.Acquire(t.Context(), slots.AcquireParams{Holder: w.ID.String(), TTL: time.Hour, Scopes: []slots.Scope{{Name: model, Limit: 1}}})
	require.NoError(t, err)

	cur, err := task.Get(t.Context(), b.pool, w.ID)
	require.NoError(t, err)
	require.Equal(t, task.WaitingRetry, cur.Status)
	require.Equal(t, w.Version+1, cur.Version)
	require.True(t, task.SubmitStarts(cur, time.Now()), "the woken task is due now, not at its fallback")

	var payload []byte
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT payload FROM outbox_events WHERE aggregate_id = $1 AND event_type = $2
		AND deliver_at IS NULL`, w.ID.String(), task.SubmitRequested{}.EventType()).Scan(&payload))
	var req task.SubmitRequested
	require.NoError(t, json.Unmarshal(payload, &req))
	require.True(t, req.Holds(cur), "the wake-up's submit event expects the task as woken: %+v", req.Wait)

	pos, err := waitlist.Position(t.Context(), b.pool, w.ID)
	require.NoError(t, err)
	require.Nil(t, pos, "a woken task is not on the list")
}

// A woken task whose submit found its slot taken after all joins again
// at its old rank, ahead of those who came after it.
func TestRejoinKeepsTheRank(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	ten := b.tenant(t, 1)
	running := b.hold(t, "job")
	first := b.waiting(t, ten)
	second := b.waiting(t, ten)
	require.Equal(t, first.ID, b.release(t, running))
	require.NoError(t, b.limiter.Release(t.Context(), leaseOf(first))) // lost it
	cur, err := task.Get(t.Context(), b.pool, first.ID)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		return b.list.Join(t.Context(), tx, cur, waitlist.Wait{Scope: model, Provider: provider, Reason: "no free slot"})
	}))
	pos, err := waitlist.Position(t.Context(), b.pool, first.ID)
	require.NoError(t, err)
	require.Equal(t, 1, pos.Position)
	pos, err = waitlist.Position(t.Context(), b.pool, second.ID)
	require.NoError(t, err)
	require.Equal(t, &waitlist.Queue{Position: 2, AheadOfYou: 1, Reason: waitlist.ReasonProviderSlots, Scope: model,
		ETASeconds: 2 * b.interval(t).Seconds()}, pos)
}

// A task that left WAITING_RETRY (canceled) is passed over and taken off
// the list.
func TestTaskNoLongerWaitingIsPassedOver(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	ten := b.tenant(t, 1)
	running := b.hold(t, "job")
	gone := b.waiting(t, ten)
	next := b.waiting(t, ten)
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		_, err := task.Apply(t.Context(), tx, api, gone, task.Transition{To: task.Canceled, Reason: "canceled"})
		return err
	}))
	require.Equal(t, next.ID, b.release(t, running))
	var rows int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM slot_waits WHERE task_id = $1`, gone.ID).Scan(&rows))
	require.Zero(t, rows)
}

// A slot freed without a handoff (a lease that expired, a Redis that lost
// its data) is found by WakeIdle, the reconciler's repair.
func TestWakeIdleRepairsALostWakeUp(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	ten := b.tenant(t, 1)
	running := b.hold(t, "job")
	w := b.waiting(t, ten)
	woken, err := b.list.WakeIdle(t.Context(), model, nil)
	require.NoError(t, err)
	require.Equal(t, uuid.Nil, woken, "no room: nobody is woken")

	require.NoError(t, b.limiter.Release(t.Context(), running)) // no handoff
	audited := uuid.Nil
	woken, err = b.list.WakeIdle(t.Context(), model, func(_ context.Context, _ pgx.Tx, id uuid.UUID) error { audited = id; return nil })
	require.NoError(t, err)
	require.Equal(t, w.ID, woken)
	require.Equal(t, w.ID, audited)

	holders, err := waitlist.Woken(t.Context(), b.pool)
	require.NoError(t, err)
	require.Equal(t, []waitlist.Holder{{TaskID: w.ID, TenantID: ten, Model: "m1", Provider: provider}}, holders)
}

// The waiter's own tenant scope full: the release passes it over for the
// next, and the freed slot is not kept from anybody.
func TestWaiterRefusedByItsOwnScopeIsPassedOver(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 1)
	busy, free := b.tenant(t, 9), b.tenant(t, 1)
	running := b.hold(t, "job")
	blocked := b.waiting(t, busy)
	_, err := b.limiter.Acquire(t.Context(), slots.AcquireParams{Holder: "busy-job", TTL: time.Hour,
		Scopes: []slots.Scope{{Name: "tenant:" + busy.String(), Limit: 1}}})
	require.NoError(t, err)
	next := b.waiting(t, free)

	require.Equal(t, next.ID, b.release(t, running))
	pos, err := waitlist.Position(t.Context(), b.pool, blocked.ID)
	require.NoError(t, err)
	require.Equal(t, 1, pos.Position, "it keeps its place")
}

func TestLeaveReturnsTheSlotHeldElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	ten := b.tenant(t, 1)
	running := b.hold(t, "job")
	w := b.waiting(t, ten)
	require.Equal(t, w.ID, b.release(t, running))
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		lease, err := waitlist.Leave(t.Context(), tx, w.ID, "p2")
		require.Equal(t, &slots.Lease{Holder: w.ID.String(), Scopes: []string{"provider:" + provider}, TTL: time.Minute}, lease)
		return err
	}))
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		lease, err := waitlist.Leave(t.Context(), tx, w.ID, "p2")
		require.Nil(t, lease, "gone from the list")
		return err
	}))
}

// A woken task that goes on to wait for something else leaves the list,
// and says where the slots handed to it are, for its caller to pass on.
func TestDropReturnsTheSlotsAWakeUpHanded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, 10)
	ten := b.tenant(t, 1)
	running := b.hold(t, "job")
	w := b.waiting(t, ten)
	still := b.waiting(t, ten)
	require.Equal(t, w.ID, b.release(t, running))
	for _, c := range []struct {
		id   uuid.UUID
		want string
	}{{w.ID, provider}, {still.ID, ""}, {w.ID, ""}} {
		require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			got, err := waitlist.Drop(t.Context(), tx, c.id)
			require.Equal(t, c.want, got)
			return err
		}))
	}
}
