// Package aggregate is the one way a stage changes an aggregate (a task, a
// render, an upload): a guarded transition, the shape of river's
// JobSetStateIfRunning. The caller says what it wants to do and under
// which state of the row it still holds; [Apply] locks the row, answers
// [Stale] when the precondition no longer holds, refuses a move the
// aggregate's table of legal moves does not have, and otherwise runs the
// caller's work on the row as locked.
//
// # Guarantees
//
//   - The precondition is checked on the row as locked (SELECT ... FOR
//     UPDATE in the caller's transaction), never on an earlier read: two
//     Applies on one row serialize, and the second sees what the first
//     committed.
//   - A precondition that does not hold is [Stale], a result and not an
//     error: the work does not run and nothing is written. The caller
//     records a stale no-op; it never retries blindly.
//   - A move the table does not have is refused with an [*IllegalMoveError]
//     (errors.Is [ErrIllegalMove]) before the work runs: it is a bug in the
//     caller, not a race.
//
// The SQL stays with the aggregate's own package (shared/task,
// shared/render, shared/asset): a [Kind] is how that package locks a row
// and which moves it allows; the work writes through that package's
// versioned update. The conformance suite aggregatetest checks every
// Kind against a real PostgreSQL.
package aggregate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Result is what a guarded transition did.
type Result int

// The results of [Apply].
const (
	// Applied: the precondition held and the work ran.
	Applied Result = iota + 1
	// Stale: the aggregate no longer needs the transition (its row as
	// locked did not meet the precondition, or the work found so); nothing
	// the transition would have written was written.
	Stale
)

func (r Result) String() string {
	switch r {
	case Applied:
		return "applied"
	case Stale:
		return "stale"
	}
	return fmt.Sprintf("Result(%d)", int(r))
}

// ErrIllegalMove: the aggregate's table of legal moves has no such move.
var ErrIllegalMove = errors.New("illegal move")

// IllegalMoveError is a move refused by an aggregate's table.
type IllegalMoveError struct {
	Kind     string // the aggregate: "task", "render", "upload"
	ID       string
	From, To string
}

func (e *IllegalMoveError) Error() string {
	return fmt.Sprintf("%s: %s %s cannot move %s -> %s", ErrIllegalMove, e.Kind, e.ID, e.From, e.To)
}

// Unwrap makes errors.Is(err, ErrIllegalMove) hold.
func (e *IllegalMoveError) Unwrap() error { return ErrIllegalMove }

// Moves is an aggregate's table of legal moves: from each state, the
// states it may go to. A state with no entry goes nowhere.
type Moves[S ~string] map[S][]S

// Legal reports whether the table has the move from -> to.
func (m Moves[S]) Legal(from, to S) bool { return slices.Contains(m[from], to) }

// Kind is one aggregate type, as its own package defines it.
type Kind[ID any, S ~string, R any] struct {
	// Name names the aggregate in errors: "task", "render", "upload".
	Name string
	// States lists every state, for the conformance suite.
	States []S
	// Moves is the table of legal moves.
	Moves Moves[S]
	// Lock reads the row and locks it until tx ends (SELECT ... FOR
	// UPDATE).
	Lock func(ctx context.Context, tx pgx.Tx, id ID) (R, error)
	// Status is the state of a row.
	Status func(R) S
	// Version is the version of a row, which every applied move increases
	// by one; nil: the table keeps none.
	Version func(R) int64
}

// Transition is a change a caller wants, with the precondition under
// which it still holds.
type Transition[S ~string, R any] struct {
	// From lists the states the transition holds in; empty: any.
	From []S
	// If is a further precondition on the row as locked (the provider job
	// an event is about, say); nil: none.
	If func(cur R) bool
	// To is the state the work moves the row to, checked against the
	// table before the work runs; empty: the work decides (and the
	// aggregate's write checks the table), or changes the row in place.
	To S
}

// Into is t moving the row to to.
func (t Transition[S, R]) Into(to S) Transition[S, R] {
	t.To = to
	return t
}

// Holds reports whether t's precondition holds for cur in state s.
func (t Transition[S, R]) Holds(s S, cur R) bool {
	if len(t.From) > 0 && !slices.Contains(t.From, s) {
		return false
	}
	return t.If == nil || t.If(cur)
}

// Act is the work of a transition on the row as locked, in the same
// transaction: it writes through the aggregate's versioned update. It
// answers [Stale] when it finds, past the precondition, that the
// aggregate no longer needs it (another table said so); then it must
// not have written the transition's change.
type Act[R any] func(ctx context.Context, tx pgx.Tx, cur R) (Result, error)

// Apply locks row id of kind k in tx and, if tr's precondition holds on
// it and tr's move is legal, runs act on it. A precondition that does not
// hold is [Stale] with a nil error, and act does not run. An illegal move
// is an [*IllegalMoveError]. act's error is returned unchanged, for the
// caller to roll tx back.
func Apply[ID any, S ~string, R any](ctx context.Context, tx pgx.Tx, k Kind[ID, S, R], id ID, tr Transition[S, R], act Act[R]) (Result, error) {
	cur, err := k.Lock(ctx, tx, id)
	if err != nil {
		return 0, err
	}
	from := k.Status(cur)
	if !tr.Holds(from, cur) {
		return Stale, nil
	}
	if tr.To != "" && !k.Moves.Legal(from, tr.To) {
		return 0, &IllegalMoveError{Kind: k.Name, ID: fmt.Sprint(id), From: string(from), To: string(tr.To)}
	}
	res, err := act(ctx, tx, cur)
	if err != nil {
		return 0, err
	}
	if res != Applied && res != Stale {
		return 0, fmt.Errorf("%s %v: the work of a transition answered %v, neither applied nor stale", k.Name, id, res)
	}
	return res, nil
}
