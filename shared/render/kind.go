package render

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/aggregate"
)

// moves is the render's table of legal moves. A queued render is planned
// (RENDERING), ends with an output an identical render stored before
// (SUCCEEDED), fails to plan (FAILED) or is canceled; a rendering one
// joins (SUCCEEDED), fails a chunk for good or is stuck (FAILED) or is
// canceled. Nothing leaves an end. A change that keeps the status
// (progress, a re-ask, a reconciler's touch) is no move.
var moves = aggregate.Moves[Status]{
	Queued:    {Rendering, Succeeded, Failed, Canceled},
	Rendering: {Succeeded, Failed, Canceled},
}

// Legal reports whether a render may move from one status to another.
func Legal(from, to Status) bool { return moves.Legal(from, to) }

// Kind is the render as an aggregate: its statuses, its table of legal
// moves and its lock, for [aggregate.Apply]. A transition's work moves
// the render with [Apply].
var Kind = aggregate.Kind[uuid.UUID, Status, Job]{
	Name:    "render",
	States:  []Status{Queued, Rendering, Succeeded, Failed, Canceled},
	Moves:   moves,
	Lock:    Lock,
	Status:  func(j Job) Status { return j.Status },
	Version: func(j Job) int64 { return j.Version },
}

// Guard is a transition of a render that holds while the render, as
// locked, is in one of from (any status when from is empty).
func Guard(from ...Status) aggregate.Transition[Status, Job] {
	return aggregate.Transition[Status, Job]{From: from}
}

// Running is the transition of a render that holds while it is not over.
func Running() aggregate.Transition[Status, Job] {
	return aggregate.Transition[Status, Job]{If: func(j Job) bool { return !j.Status.Terminal() }}
}
