// Package waitlist is where generation tasks wait for concurrency slots
// (package slots) when their scopes are full, and how a released slot goes
// to the right one of them at once.
//
// # Order
//
// The waiters of a scope are served lowest rank first. A rank is the
// tenant's fair tag less a head start for the tenant's priority:
//
//	rank = tag − min(PriorityStep × tenant priority, AgingMax)
//	tag  = max(now, the tenant's previous tag in the scope) + grant interval
//
// The grant interval is how often the scope hands a waiter of the
// tenant's priority a slot under load (an average kept in
// slot_wait_scopes). A tenant's tags therefore advance as fast as its
// priority class is served: a tenant that queues 10,000 tasks at once
// holds tags far into the future, and another tenant's first task of the
// same priority, tagged now, is served after about one grant of that
// class. The head start is
// aging: a task that has waited PriorityStep × (difference of priorities)
// passes newer work of a higher priority, so nothing waits for ever behind
// a stream of higher-priority work; the cap AgingMax bounds how long any
// priority can make another wait.
//
// # Handoff
//
// [List.Release] frees a lease and, in one transaction, picks the best
// waiters of its scopes (FOR UPDATE SKIP LOCKED, so two releases pick two
// waiters) and hands the freed slot to the first whose own scopes have
// room, in one Redis step ([slots.Limiter.Handoff]): nobody acquiring in
// between can take it. The woken task is moved to WAITING_RETRY due now,
// with an immediate submit event, in the same transaction; its submit
// finds its slots already held (acquiring is idempotent per holder).
//
// # What survives what
//
// The waiting lives in PostgreSQL (slot_waits), so a Redis restart loses
// none of it; the slots themselves are rebuilt from PostgreSQL by the
// reconciler, which counts a woken task's held slots ([Woken]). A wake-up
// that is lost (a process died between the release and the handoff, a
// lease that expired instead of being released) is repaired by
// [List.WakeIdle], which the reconciler runs: it hands free room to the
// best waiters, as a release would. A waiting task also keeps its delayed
// resubmit, the timer of the backoff scheduler, as a last fallback.
package waitlist

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/slots"
	"github.com/aivedio/pipeline/shared/task"
)

// Defaults of [Params].
const (
	DefaultPriorityStep  = 15 * time.Second
	DefaultAgingMax      = 30 * time.Minute
	DefaultGrantInterval = time.Second
	// DefaultCandidates bounds the waiters one release tries: those whose
	// own scopes are full are passed over for the next.
	DefaultCandidates = 8
)

// Params are a List's knobs; a zero field takes its Default* constant.
type Params struct {
	// PriorityStep is the head start one point of tenant priority gives
	// (SCHED_PRIORITY_STEP).
	PriorityStep time.Duration
	// AgingMax caps the head start (SCHED_AGING_MAX): no task waits longer
	// than this behind newer work for its priority alone.
	AgingMax time.Duration
	// GrantInterval is the grant interval of a scope that has handed no
	// slot yet.
	GrantInterval time.Duration
	Candidates    int
}

// Scopes are the slots a woken task takes at provider: the same as its
// submit acquires (stage.GenerationSlots).
type Scopes func(t task.Task, provider string) slots.AcquireParams

// List is the wait list. It is safe for concurrent use and keeps no state
// of its own.
type List struct {
	db     pg.DB
	slots  *slots.Limiter
	scopes Scopes
	origin task.Origin
	p      Params
	paused *pauseCache
}

// New returns the list over db and limiter; the wake-ups it writes carry
// producer as their envelope producer.
func New(db pg.DB, limiter *slots.Limiter, scopes Scopes, producer string, p *Params) *List {
	if p == nil {
		p = &Params{}
	}
	q := *p
	q.PriorityStep = cmp.Or(q.PriorityStep, DefaultPriorityStep)
	q.AgingMax = cmp.Or(q.AgingMax, DefaultAgingMax)
	q.GrantInterval = cmp.Or(q.GrantInterval, DefaultGrantInterval)
	q.Candidates = cmp.Or(q.Candidates, DefaultCandidates)
	return &List{db: db, slots: limiter, scopes: scopes, origin: task.Origin{Producer: producer}, p: q, paused: &pauseCache{db: db}}
}

// Wait is what a task waits for: the full scope that refused it, and the
// provider whose slots it takes when woken.
type Wait struct {
	Scope    string
	Provider string
	Reason   string
	// Refusals are the provider refusals of the submit so far, which the
	// wake-up carries on (SUBMIT_MAX_RETRIES counts them).
	Refusals int
}

// WaitOf is the wait of a submit refused by err, which matches
// [slots.ErrNoSlot], at provider; false for any other error.
func WaitOf(err error, provider string) (Wait, bool) {
	var full *slots.FullError
	if !errors.As(err, &full) {
		return Wait{}, false
	}
	return Wait{Scope: full.Scope, Provider: provider, Reason: err.Error()}, true
}

// Join puts t on the wait list in tx, the transaction that records its
// wait. A task that waits already (woken, and refused again) keeps its
// rank: it goes back to where it was.
func (l *List) Join(ctx context.Context, tx pgx.Tx, t task.Task, w Wait) error {
	if w.Scope == "" || w.Provider == "" {
		return fmt.Errorf("join the wait list: task %s names no scope or provider", t.ID)
	}
	_, err := tx.Exec(ctx, `WITH prior AS (SELECT 1 FROM slot_waits WHERE task_id = $1),
		tenant AS (SELECT coalesce((SELECT priority FROM tenants WHERE tenant_id = $2), 0) AS priority),
		interval AS (SELECT coalesce((SELECT s.grant_interval_ms FROM slot_wait_scopes s, tenant
			WHERE s.scope = $3 AND s.priority = tenant.priority), $6)::bigint AS ms),
		now AS (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS ms),
		tag AS (INSERT INTO slot_wait_tags (scope, tenant_id, tag_ms)
			SELECT $3, $2, now.ms + interval.ms FROM now, interval WHERE NOT EXISTS (SELECT 1 FROM prior)
			ON CONFLICT (scope, tenant_id) DO UPDATE
				SET tag_ms = greatest(slot_wait_tags.tag_ms, (SELECT ms FROM now)) + (SELECT ms FROM interval)
			RETURNING tag_ms)
		INSERT INTO slot_waits (task_id, tenant_id, scope, provider, priority, rank_ms, reason, refusals)
		SELECT $1, $2, $3, $4, tenant.priority,
			coalesce((SELECT tag_ms FROM tag), 0) - least(tenant.priority::bigint * $7, $8), $5, $9
		FROM tenant
		ON CONFLICT (task_id) DO UPDATE SET woken_at = NULL, scope = EXCLUDED.scope, provider = EXCLUDED.provider,
			reason = EXCLUDED.reason, refusals = EXCLUDED.refusals`,
		t.ID, t.TenantID, w.Scope, w.Provider, w.Reason, l.p.GrantInterval.Milliseconds(),
		l.p.PriorityStep.Milliseconds(), l.p.AgingMax.Milliseconds(), w.Refusals)
	if err != nil {
		return fmt.Errorf("join the wait list for %s: %w", w.Scope, err)
	}
	joins.Inc() // counted before the commit: a rolled-back join is rare and retried
	return nil
}

// Leave takes the task off the wait list in tx, the transaction that
// moves it to SUBMITTING at provider. It returns the lease the wake-up
// took at another provider, which the caller releases after the commit:
// the task does not run there.
func Leave(ctx context.Context, tx pgx.Tx, id uuid.UUID, provider string) (*slots.Lease, error) {
	var reserved string
	var woken bool
	err := tx.QueryRow(ctx, `DELETE FROM slot_waits WHERE task_id = $1 RETURNING provider, woken_at IS NOT NULL`, id).Scan(&reserved, &woken)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("leave the wait list: %w", err)
	case !woken || reserved == provider:
		return nil, nil
	}
	return &slots.Lease{Holder: id.String(), Scopes: []string{"provider:" + reserved}, TTL: time.Minute}, nil
}

// Drop takes the task off the wait list in tx, the transaction that
// records a wait for something else (an open circuit, a provider's 429).
// When a wake-up had handed it slots, it returns the provider they were
// taken at: the caller releases them after the commit, for the next
// waiter, since the task does not use them now.
func Drop(ctx context.Context, tx pgx.Tx, id uuid.UUID) (provider string, err error) {
	var woken bool
	err = tx.QueryRow(ctx, `DELETE FROM slot_waits WHERE task_id = $1 RETURNING provider, woken_at IS NOT NULL`, id).Scan(&provider, &woken)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("leave the wait list: %w", err)
	case !woken:
		return "", nil
	}
	return provider, nil
}

// errNoRoom ends a handoff: the scope waited for has no room.
var errNoRoom = errors.New("no room in the scope")

// waiter is one row of slot_waits as a handoff reads it.
type waiter struct {
	TaskID   uuid.UUID
	Scope    string
	Provider string
	Refusals int
	Priority int
}

// Release frees lease (a task's slots, after its job ended) and hands the
// freed slot to the best waiter of its scopes that can take it. It returns
// the task woken, uuid.Nil when none could be.
func (l *List) Release(ctx context.Context, lease slots.Lease) (uuid.UUID, error) {
	woken, released, err := l.handoff(ctx, lease.Scopes, &lease, nil)
	if !released {
		// No waiter took it, or the handoff failed: the slot is freed all
		// the same, and a lost wake-up is WakeIdle's to repair.
		err = errors.Join(err, l.slots.Release(ctx, lease))
	}
	return woken, err
}

// WakeIdle hands free room in scope to its best waiter, as a release
// would have: the repair of a wake-up that was lost. audit, when not nil,
// writes the repair's record in the wake-up's transaction. It returns the
// task woken, uuid.Nil when the scope had no room or no waiter.
func (l *List) WakeIdle(ctx context.Context, scope string, audit func(ctx context.Context, tx pgx.Tx, woken uuid.UUID) error) (uuid.UUID, error) {
	if strings.HasPrefix(scope, pausedPrefix) {
		return uuid.Nil, nil // held by a pause: only Resume moves it
	}
	woken, _, err := l.handoff(ctx, []string{scope}, nil, audit)
	return woken, err
}

// handoff picks the best waiters of scopes and hands a slot to the first
// that can take it, releasing freed (when not nil) in the same Redis step.
// released reports whether freed was released.
func (l *List) handoff(ctx context.Context, scopes []string, freed *slots.Lease,
	audit func(ctx context.Context, tx pgx.Tx, woken uuid.UUID) error,
) (woken uuid.UUID, released bool, err error) {
	var granted *slots.Lease
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		// A waiter's row changes only under its task's lock (its submit
		// joins and leaves under it, a wake-up takes it): skipping locked
		// tasks lets two releases wake two waiters instead of queueing.
		rows, _ := tx.Query(ctx, `SELECT w.task_id, w.scope, w.provider, w.refusals, w.priority FROM slot_waits w
			JOIN generation_tasks t ON t.task_id = w.task_id
			WHERE w.scope = ANY($1) AND w.woken_at IS NULL ORDER BY w.rank_ms, w.task_id LIMIT $2 FOR UPDATE OF t SKIP LOCKED`,
			scopes, l.p.Candidates)
		found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[waiter]) // a failed query's error too
		if err != nil {
			return fmt.Errorf("read the wait list: %w", err)
		}
		for _, w := range found {
			ok, err := l.wake(ctx, tx, w, freed, &released, &granted)
			if errors.Is(err, errNoRoom) {
				return nil // the scope itself is full: nobody after this one fits either
			}
			if err != nil {
				return err
			}
			if ok {
				woken = w.TaskID
				if audit != nil {
					return audit(ctx, tx, woken)
				}
				return nil
			}
		}
		return nil
	})
	if err != nil && granted != nil {
		// The wake-up did not commit: the slot must not stay with a task
		// that does not know it holds it.
		_ = l.slots.Release(context.WithoutCancel(ctx), *granted)
		woken = uuid.Nil
	}
	if woken != uuid.Nil {
		cause := causeIdle
		if freed != nil {
			cause = causeRelease
		}
		wakeups.WithLabelValues(cause).Inc()
	}
	return woken, released, err
}

// wake hands w its slots, releasing freed first if it is not released
// yet, and wakes its task; false when w cannot take a slot now (its own
// scopes are full) or no longer waits.
func (l *List) wake(ctx context.Context, tx pgx.Tx, w waiter, freed *slots.Lease, released *bool, granted **slots.Lease) (bool, error) {
	res, err := aggregate.Apply(ctx, tx, task.Kind, w.TaskID, task.Guard(task.WaitingRetry),
		func(ctx context.Context, tx pgx.Tx, t task.Task) (aggregate.Result, error) {
			p := l.scopes(t, w.Provider)
			var (
				lease slots.Lease
				err   error
			)
			if freed != nil && !*released {
				lease, err = l.slots.Handoff(ctx, *freed, p)
				*released = err == nil || errors.Is(err, slots.ErrNoSlot)
			} else {
				lease, err = l.slots.Acquire(ctx, p)
			}
			var full *slots.FullError
			if errors.As(err, &full) && w.Scope == full.Scope {
				return 0, errNoRoom
			}
			if errors.Is(err, slots.ErrNoSlot) {
				return aggregate.Stale, nil // its own other scope is full: the next may fit
			}
			if err != nil {
				return 0, err
			}
			*granted = &lease
			return aggregate.Applied, l.wakeTask(ctx, tx, t, w)
		})
	if errors.Is(err, task.ErrNotFound) {
		res, err = aggregate.Stale, nil
	}
	if err != nil {
		return false, err
	}
	if res != aggregate.Applied {
		// Gone from WAITING_RETRY (canceled, or submitted by its fallback
		// timer): off the list. A full scope leaves it where it is.
		_, err := tx.Exec(ctx, `DELETE FROM slot_waits w USING generation_tasks t
			WHERE w.task_id = $1 AND t.task_id = w.task_id AND t.status <> $2`, w.TaskID, task.WaitingRetry)
		return false, err
	}
	return true, nil
}

// wakeTask marks w woken and makes its task due now, with the submit event
// that starts it; the scope's grant interval learns from the grant.
func (l *List) wakeTask(ctx context.Context, tx pgx.Tx, t task.Task, w waiter) error {
	if _, err := tx.Exec(ctx, `UPDATE slot_waits SET woken_at = clock_timestamp() WHERE task_id = $1`, w.TaskID); err != nil {
		return fmt.Errorf("mark waiter woken: %w", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO slot_wait_scopes AS s (scope, priority, grant_interval_ms, last_grant_at)
		VALUES ($1, $3, $2, clock_timestamp())
		ON CONFLICT (scope, priority) DO UPDATE SET last_grant_at = EXCLUDED.last_grant_at,
			grant_interval_ms = greatest(1, 0.8 * s.grant_interval_ms
				+ 0.2 * least(extract(epoch FROM EXCLUDED.last_grant_at - coalesce(s.last_grant_at, EXCLUDED.last_grant_at)) * 1000, 600000))`,
		w.Scope, float64(l.p.GrantInterval.Milliseconds()), w.Priority); err != nil {
		return fmt.Errorf("record the grant of %s: %w", w.Scope, err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	reason := "woken: a slot of " + w.Scope + " was handed over"
	ev, err := l.origin.Emit(t, task.SubmitRequested{TaskID: t.ID, Version: t.Version + 1, Refusals: w.Refusals, Wait: task.Wait{
		ExpectedStatus: task.WaitingRetry, ExpectedVersion: t.Version + 1, NotBefore: now, Reason: reason}})
	if err != nil {
		return err
	}
	_, err = task.Apply(ctx, tx, l.origin, t, task.Transition{To: task.WaitingRetry, Reason: reason,
		Set: task.Fields{NextRetryAt: &now}, Events: []outbox.Event{ev}})
	return err
}

// Holder is a woken task that holds its slots before its submit runs.
type Holder struct {
	TaskID   uuid.UUID
	TenantID uuid.UUID
	Model    string
	Provider string
}

// Woken lists the tasks a wake-up handed slots to that have not entered
// SUBMITTING yet: the slot rebuilder counts them in flight, or a rebuild
// would give their slots away.
func Woken(ctx context.Context, q pg.Querier) ([]Holder, error) {
	rows, _ := q.Query(ctx, `SELECT w.task_id, w.tenant_id, t.model, w.provider FROM slot_waits w
		JOIN generation_tasks t ON t.task_id = w.task_id
		WHERE w.woken_at IS NOT NULL AND t.status = $1`, task.WaitingRetry)
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Holder]) // a failed query's error too
	if err != nil {
		return nil, fmt.Errorf("read woken waiters: %w", err)
	}
	return found, nil
}

// The reasons a waiting task shows (Queue.Reason).
const (
	ReasonProviderSlots = "provider slots full"
	ReasonTenantLimit   = "tenant limit"
)

// aheadCap bounds the count of waiters ahead of a task: past it a queue
// shows AheadOfYou as the cap, and AtLeast.
const aheadCap = 1000

// Queue is where a waiting task stands, as its status shows it.
type Queue struct {
	Position   int    `json:"position"`
	AheadOfYou int    `json:"ahead_of_you"`
	AtLeast    bool   `json:"at_least,omitempty"` // more than AheadOfYou are ahead
	Reason     string `json:"reason"`
	Scope      string `json:"-"` // the full scope: it names a model, provider or tenant
	// ETASeconds is an estimate of the wait left, from the scope's recent
	// turnover: (ahead + 1) grant intervals.
	ETASeconds float64 `json:"eta_seconds"`
}

// Position is where task id stands on the wait list; nil when it is not
// waiting there (or a wake-up is on its way to it).
func Position(ctx context.Context, q pg.Querier, id uuid.UUID) (*Queue, error) {
	var (
		qu       Queue
		interval float64
	)
	err := q.QueryRow(ctx, `SELECT w.scope,
			(SELECT count(*) FROM (SELECT 1 FROM slot_waits o WHERE o.scope = w.scope AND o.woken_at IS NULL
				AND (o.rank_ms, o.task_id) < (w.rank_ms, w.task_id) LIMIT $2) ahead),
			coalesce((SELECT 1 / sum(1 / grant_interval_ms) FROM slot_wait_scopes s WHERE s.scope = w.scope), $3)
		FROM slot_waits w WHERE w.task_id = $1 AND w.woken_at IS NULL`, id, aheadCap, float64(DefaultGrantInterval.Milliseconds())).
		Scan(&qu.Scope, &qu.AheadOfYou, &interval)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the queue position of %s: %w", id, err)
	}
	qu.AtLeast = qu.AheadOfYou >= aheadCap
	qu.Position = qu.AheadOfYou + 1
	switch {
	case strings.HasPrefix(qu.Scope, pausedPrefix):
		qu.Reason = ReasonPaused
	case strings.HasPrefix(qu.Scope, "tenant:"):
		qu.Reason = ReasonTenantLimit
	default:
		qu.Reason = ReasonProviderSlots
	}
	qu.ETASeconds = float64(qu.Position) * interval / 1000
	return &qu, nil
}

// Waiting lists the scopes with waiters not woken, at most limit, for
// the repair of lost wake-ups; the work a pause holds is not among them.
func Waiting(ctx context.Context, q pg.Querier, limit int) ([]string, error) {
	rows, _ := q.Query(ctx, `SELECT DISTINCT scope FROM slot_waits WHERE woken_at IS NULL AND scope NOT LIKE $2 ORDER BY scope LIMIT $1`,
		limit, pausedPrefix+"%")
	found, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the waiting scopes: %w", err)
	}
	return found, nil
}
