package waitlist

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/aivedio/pipeline/shared/pg"
)

// Pausing (seed 7.14.3): an operator pauses new work on a provider, a
// model or a tenant. A submit that would start work in a paused scope
// joins the wait list under PausedScope(scope) with the reason "paused";
// nothing fails and nothing is lost. Resuming moves those waiters to the
// scope itself and wakes them in their order, as slots allow.

// ReasonPaused is the reason a paused task shows (Queue.Reason).
const ReasonPaused = "paused"

// pausedPrefix marks the wait list scope of work held by a pause.
const pausedPrefix = "paused:"

// The kinds of scope that can be paused.
var pauseKinds = []string{"provider", "model", "tenant"}

// Errors of pausing.
var (
	// ErrPauseInvalid: a kind, name, ticket, operator or reason is missing
	// or malformed.
	ErrPauseInvalid = errors.New("invalid pause")
	// ErrAlreadyPaused: the scope is paused already.
	ErrAlreadyPaused = errors.New("already paused")
	// ErrNotPaused: there is no pause of the scope to resume.
	ErrNotPaused = errors.New("not paused")
)

// PausedScope is the wait list scope of work a pause of scope holds.
func PausedScope(scope string) string { return pausedPrefix + scope }

// PauseScope is the slot scope a pause of kind and name covers:
// "provider:replicate", "model:<name>", "tenant:<id>".
func PauseScope(kind, name string) (string, error) {
	ok := false
	for _, k := range pauseKinds {
		ok = ok || k == kind
	}
	switch {
	case !ok:
		return "", fmt.Errorf("%w: kind %q is not one of %s", ErrPauseInvalid, kind, strings.Join(pauseKinds, ", "))
	case strings.TrimSpace(name) == "" || strings.ContainsAny(name, " \t\n{}"):
		return "", fmt.Errorf("%w: %s name %q is empty or has spaces or braces", ErrPauseInvalid, kind, name)
	}
	return kind + ":" + name, nil
}

// Decision is who pauses or resumes, under which ticket, and why.
type Decision struct {
	Ticket, Operator, Reason string
}

func (d Decision) validate() error {
	for _, f := range []struct{ name, v string }{{"ticket", d.Ticket}, {"operator", d.Operator}, {"reason", d.Reason}} {
		if strings.TrimSpace(f.v) == "" {
			return fmt.Errorf("%w: %s is required", ErrPauseInvalid, f.name)
		}
	}
	return nil
}

// Pause is one row of scheduling_pauses.
type Pause struct {
	ID             int64      `json:"pause_id"`
	Scope          string     `json:"scope"`
	Ticket         string     `json:"ticket"`
	Operator       string     `json:"operator"`
	Reason         string     `json:"reason"`
	PausedAt       time.Time  `json:"paused_at"`
	ResumedAt      *time.Time `json:"resumed_at,omitempty"`
	ResumeTicket   *string    `json:"resume_ticket,omitempty"`
	ResumeOperator *string    `json:"resume_operator,omitempty"`
	ResumeReason   *string    `json:"resume_reason,omitempty"`
}

const pauseColumns = `pause_id, scope, ticket, operator, reason, paused_at, resumed_at, resume_ticket, resume_operator, resume_reason`

// PauseWork pauses new work in scope (see [PauseScope]) under d.
func PauseWork(ctx context.Context, db pg.Querier, scope string, d Decision) (Pause, error) {
	if err := d.validate(); err != nil {
		return Pause{}, err
	}
	rows, _ := db.Query(ctx, `INSERT INTO scheduling_pauses (scope, ticket, operator, reason) VALUES ($1, $2, $3, $4)
		RETURNING `+pauseColumns, scope, d.Ticket, d.Operator, d.Reason)
	p, err := pgx.CollectOneRow(rows, pgx.RowToStructByPos[Pause])
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return Pause{}, fmt.Errorf("%w: %s; resume it first", ErrAlreadyPaused, scope)
	}
	if err != nil {
		return Pause{}, fmt.Errorf("pause %s: %w", scope, err)
	}
	return p, nil
}

// Pauses lists the pauses in force, and with all the ended ones too,
// newest first.
func Pauses(ctx context.Context, q pg.Querier, all bool) ([]Pause, error) {
	rows, _ := q.Query(ctx, `SELECT `+pauseColumns+` FROM scheduling_pauses WHERE $1 OR resumed_at IS NULL ORDER BY pause_id DESC`, all)
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Pause])
	if err != nil {
		return nil, fmt.Errorf("list pauses: %w", err)
	}
	return found, nil
}

// ResumeWork ends the pause of scope under d and moves the work it held
// to the scope's own wait list, at the ranks it had: the next handoff or
// the reconciler's wait-list waker wakes it from there, best first. It
// returns the pause as ended and how many tasks it moved.
func ResumeWork(ctx context.Context, db pg.DB, scope string, d Decision) (Pause, int64, error) {
	if err := d.validate(); err != nil {
		return Pause{}, 0, err
	}
	var (
		p     Pause
		moved int64
	)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `UPDATE scheduling_pauses SET resumed_at = clock_timestamp(), resume_ticket = $2,
				resume_operator = $3, resume_reason = $4
			WHERE scope = $1 AND resumed_at IS NULL RETURNING `+pauseColumns, scope, d.Ticket, d.Operator, d.Reason)
		var err error
		p, err = pgx.CollectOneRow(rows, pgx.RowToStructByPos[Pause])
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNotPaused, scope)
		}
		if err != nil {
			return fmt.Errorf("resume %s: %w", scope, err)
		}
		tag, err := tx.Exec(ctx, `UPDATE slot_waits SET scope = $2 WHERE scope = $1`, PausedScope(scope), scope)
		if err != nil {
			return fmt.Errorf("move the work %s held: %w", scope, err)
		}
		moved = tag.RowsAffected()
		return nil
	})
	return p, moved, err
}

// Resume is [ResumeWork], then wakes as much of the moved work as the
// slots admit, best first, once every process's view of the pauses has
// caught up; the rest is woken as slots free. It returns the pause as
// ended and how many tasks it woke.
func (l *List) Resume(ctx context.Context, scope string, d Decision) (Pause, int, error) {
	p, _, err := ResumeWork(ctx, l.db, scope, d)
	if err != nil {
		return Pause{}, 0, err
	}
	l.paused.forget()
	// A task woken sooner could meet a submit whose view still holds the
	// pause, and go back to waiting on it.
	select {
	case <-ctx.Done():
		return p, 0, ctx.Err()
	case <-time.After(pauseCacheTTL):
	}
	woke := 0
	for {
		id, err := l.WakeIdle(ctx, scope, nil)
		if err != nil || id == uuid.Nil {
			return p, woke, err
		}
		woke++
	}
}

// pauseCacheTTL is how stale a process's view of the pauses may be: a
// pause or a resume takes effect in every submit within it.
const pauseCacheTTL = 2 * time.Second

// pauseCache is the scopes paused now, read at most once per
// pauseCacheTTL: a submit asks on every start, and pauses are rare.
type pauseCache struct {
	db     pg.Querier
	mu     sync.Mutex
	at     time.Time
	scopes map[string]bool
}

func (c *pauseCache) forget() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// paused reports whether scope is paused, by a view at most
// pauseCacheTTL old.
func (c *pauseCache) paused(ctx context.Context, scope string) (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > pauseCacheTTL {
		rows, _ := c.db.Query(ctx, `SELECT scope FROM scheduling_pauses WHERE resumed_at IS NULL`)
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return false, fmt.Errorf("read the pauses: %w", err)
		}
		c.scopes = map[string]bool{}
		for _, s := range found {
			c.scopes[s] = true
		}
		c.at = time.Now()
	}
	return c.scopes[scope], nil
}

// Paused reports whether new work in scope is paused now (within
// pauseCacheTTL).
func (l *List) Paused(ctx context.Context, scope string) (bool, error) {
	return l.paused.paused(ctx, scope)
}
