package task

import (
	"slices"

	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/aggregate"
)

// moves is the task's table of legal moves: [transitions], and from every
// state that is not terminal FAILED (a permanent error or the maximum
// wait) and NEEDS_ATTENTION (a failure no retry can cure, a step
// re-emitted without progress: a person decides, the reservation stays
// held).
var moves = func() aggregate.Moves[Status] {
	m := aggregate.Moves[Status]{}
	for _, from := range All() {
		if from.Terminal() {
			continue
		}
		to := append([]Status(nil), transitions[from]...)
		for _, always := range []Status{Failed, NeedsAttention} {
			if !slices.Contains(to, always) {
				to = append(to, always)
			}
		}
		m[from] = to
	}
	return m
}()

// Kind is the task as an aggregate: its states, its table of legal moves
// and its lock, for [aggregate.Apply]. A transition's work moves the task
// with [Apply], [Fail] or [Touch].
var Kind = aggregate.Kind[uuid.UUID, Status, Task]{
	Name:    "task",
	States:  All(),
	Moves:   moves,
	Lock:    Lock,
	Status:  func(t Task) Status { return t.Status },
	Version: func(t Task) int64 { return t.Version },
}

// Guard is a transition of a task that holds while the task, as locked,
// is in one of from (any state when from is empty).
func Guard(from ...Status) aggregate.Transition[Status, Task] {
	return aggregate.Transition[Status, Task]{From: from}
}
