// Package aggregatetest is the conformance suite every [aggregate.Kind]
// passes against a real PostgreSQL, as river's riverdrivertest is for its
// drivers: each aggregate's package (task, render, upload) runs
// [Exercise] with a way to make a row in each state and to write a move.
//
// It checks that every move of the kind's table applies and increases the
// version by one, that every other move is refused and writes nothing,
// that a precondition that does not hold is [aggregate.Stale] and writes
// nothing, and that two Applies on one row serialize: the second sees what
// the first committed.
package aggregatetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/shared/aggregate"
)

// Harness is what the suite needs of one aggregate.
type Harness[ID any, S ~string, R any] struct {
	Kind aggregate.Kind[ID, S, R]
	// Pool is a migrated schema (dbtest.TestSchema): the suite commits.
	Pool *pgxpool.Pool
	// Create makes a row in state s, committed, and returns its id.
	Create func(t *testing.T, s S) ID
	// Move writes the move of cur to to through the aggregate's own
	// versioned write, with whatever columns the state requires.
	Move func(ctx context.Context, tx pgx.Tx, cur R, to S) error
}

// lockWait bounds how long the suite waits for a second Apply to block on
// the first one's lock.
const lockWait = 10 * time.Second

// Exercise runs the suite on h.
func Exercise[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R]) {
	t.Run("LegalMovesApply", func(t *testing.T) { t.Parallel(); legalMovesApply(t, h) })
	t.Run("IllegalMovesAreRefused", func(t *testing.T) { t.Parallel(); illegalMovesAreRefused(t, h) })
	t.Run("UnheldPreconditionIsStale", func(t *testing.T) { t.Parallel(); unheldPreconditionIsStale(t, h) })
	t.Run("ConcurrentAppliesSerialize", func(t *testing.T) { t.Parallel(); concurrentAppliesSerialize(t, h) })
}

// read is the row as committed.
func read[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R], id ID) R {
	t.Helper()
	var cur R
	require.NoError(t, pgx.BeginFunc(t.Context(), h.Pool, func(tx pgx.Tx) error {
		var err error
		cur, err = h.Kind.Lock(t.Context(), tx, id)
		return err
	}))
	return cur
}

// move is the transition from -> to whose work is h.Move, and whether the
// work ran.
func move[ID any, S ~string, R any](h Harness[ID, S, R], from, to S) (aggregate.Transition[S, R], aggregate.Act[R], *bool) {
	ran := new(bool)
	act := func(ctx context.Context, tx pgx.Tx, cur R) (aggregate.Result, error) {
		*ran = true
		return aggregate.Applied, h.Move(ctx, tx, cur, to)
	}
	return aggregate.Transition[S, R]{From: []S{from}, To: to}, act, ran
}

// apply runs one Apply in its own committed transaction.
func apply[ID any, S ~string, R any](ctx context.Context, h Harness[ID, S, R], id ID, tr aggregate.Transition[S, R], act aggregate.Act[R]) (aggregate.Result, error) {
	var res aggregate.Result
	err := pgx.BeginFunc(ctx, h.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = aggregate.Apply(ctx, tx, h.Kind, id, tr, act)
		return err
	})
	return res, err
}

func requireUnchanged[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R], before, after R) {
	t.Helper()
	require.Equal(t, h.Kind.Status(before), h.Kind.Status(after), "the status changed")
	if h.Kind.Version != nil {
		require.Equal(t, h.Kind.Version(before), h.Kind.Version(after), "the version changed")
	}
}

func legalMovesApply[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R]) {
	n := 0
	for _, from := range h.Kind.States {
		for _, to := range h.Kind.Moves[from] {
			n++
			id := h.Create(t, from)
			before := read(t, h, id)
			tr, act, ran := move(h, from, to)
			res, err := apply(t.Context(), h, id, tr, act)
			require.NoError(t, err, "%s %s -> %s", h.Kind.Name, from, to)
			require.Equal(t, aggregate.Applied, res, "%s %s -> %s", h.Kind.Name, from, to)
			require.True(t, *ran, "%s %s -> %s: the work did not run", h.Kind.Name, from, to)
			after := read(t, h, id)
			require.Equal(t, to, h.Kind.Status(after), "%s %s -> %s", h.Kind.Name, from, to)
			if h.Kind.Version != nil {
				require.Equal(t, h.Kind.Version(before)+1, h.Kind.Version(after), "%s %s -> %s: a move adds one to the version", h.Kind.Name, from, to)
			}
		}
	}
	require.NotZero(t, n, "%s has no legal move", h.Kind.Name)
}

func illegalMovesAreRefused[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R]) {
	for _, from := range h.Kind.States {
		id := h.Create(t, from) // refused moves write nothing: one row serves them all
		before := read(t, h, id)
		for _, to := range h.Kind.States {
			if to == from || h.Kind.Moves.Legal(from, to) {
				continue
			}
			tr, act, ran := move(h, from, to)
			_, err := apply(t.Context(), h, id, tr, act)
			require.ErrorIs(t, err, aggregate.ErrIllegalMove, "%s %s -> %s", h.Kind.Name, from, to)
			require.False(t, *ran, "%s %s -> %s: the work of a refused move ran", h.Kind.Name, from, to)
			requireUnchanged(t, h, before, read(t, h, id))
		}
	}
}

func unheldPreconditionIsStale[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R]) {
	for _, s := range h.Kind.States {
		id := h.Create(t, s)
		before := read(t, h, id)
		others := slices.DeleteFunc(slices.Clone(h.Kind.States), func(o S) bool { return o == s })
		for name, tr := range map[string]aggregate.Transition[S, R]{
			"another state": {From: others},
			"a predicate":   {If: func(R) bool { return false }},
		} {
			ran := false
			res, err := apply(t.Context(), h, id, tr, func(context.Context, pgx.Tx, R) (aggregate.Result, error) {
				ran = true
				return aggregate.Applied, nil
			})
			require.NoError(t, err, "%s in %s, precondition on %s", h.Kind.Name, s, name)
			require.Equal(t, aggregate.Stale, res, "%s in %s, precondition on %s", h.Kind.Name, s, name)
			require.False(t, ran, "%s in %s, precondition on %s: the work ran", h.Kind.Name, s, name)
			requireUnchanged(t, h, before, read(t, h, id))
		}
	}
}

// chain is a move from -> mid followed by a legal mid -> to, if the table
// has one.
func chain[S ~string](m aggregate.Moves[S], states []S) (from, mid, to S, ok bool) {
	for _, from := range states {
		for _, mid := range m[from] {
			for _, to := range m[mid] {
				if to != mid {
					return from, mid, to, true
				}
			}
		}
	}
	return from, mid, to, false
}

func concurrentAppliesSerialize[ID any, S ~string, R any](t *testing.T, h Harness[ID, S, R]) {
	from, mid, to, ok := chain(h.Kind.Moves, h.Kind.States)
	require.True(t, ok, "%s has no two moves in a row", h.Kind.Name)
	first, firstAct, _ := move(h, from, mid)
	// The second asks for the same move: it finds it made, a stale no-op.
	// Or it asks for the next one: it finds the first's result, and moves on.
	for name, second := range map[string]struct {
		from, to S
		want     aggregate.Result
		status   S
		versions int64
	}{
		"same move": {from, mid, aggregate.Stale, mid, 1},
		"next move": {mid, to, aggregate.Applied, to, 2},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			id := h.Create(t, from)
			before := read(t, h, id)
			tx1, err := h.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx1.Rollback(context.WithoutCancel(ctx)) }()
			res, err := aggregate.Apply(ctx, tx1, h.Kind, id, first, firstAct)
			require.NoError(t, err)
			require.Equal(t, aggregate.Applied, res)

			conn, err := h.Pool.Acquire(ctx)
			require.NoError(t, err)
			defer conn.Release()
			var pid uint32
			require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
			type answer struct {
				res aggregate.Result
				err error
			}
			done := make(chan answer, 1)
			go func() {
				tr, act, _ := move(h, second.from, second.to)
				var res aggregate.Result
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					var err error
					res, err = aggregate.Apply(ctx, tx, h.Kind, id, tr, act)
					return err
				})
				done <- answer{res, err}
			}()
			waitBlocked(t, h.Pool, pid, done)
			require.NoError(t, tx1.Commit(ctx))
			got := <-done
			require.NoError(t, got.err)
			require.Equal(t, second.want, got.res, "the second Apply did not see the first's commit")
			after := read(t, h, id)
			require.Equal(t, second.status, h.Kind.Status(after))
			if h.Kind.Version != nil {
				require.Equal(t, h.Kind.Version(before)+second.versions, h.Kind.Version(after))
			}
		})
	}
}

// waitBlocked waits until backend pid waits on a lock; the second Apply
// ending first means it did not wait for the first one's lock.
func waitBlocked[A any](t *testing.T, pool *pgxpool.Pool, pid uint32, done chan A) {
	t.Helper()
	deadline := time.After(lockWait)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var waiting bool
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT coalesce(bool_or(wait_event_type = 'Lock'), false)
			FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case a := <-done:
			done <- a
			require.FailNow(t, "the second Apply did not wait for the first one's lock", fmt.Sprintf("it answered %+v", a))
		case <-deadline:
			require.FailNow(t, "the second Apply did not block on the row lock", "within %s", lockWait)
		case <-tick.C:
		}
	}
}
