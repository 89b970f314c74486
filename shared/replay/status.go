package replay

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/aggregate"
)

// Status is the state of a replay: its message_replays.status.
type Status string

// The statuses.
const (
	StatusDryRun   Status = "DRY_RUN"
	StatusApproved Status = "APPROVED"
	StatusExecuted Status = "EXECUTED"
	StatusRejected Status = "REJECTED"
)

// moves is the replay's table of legal moves, as the package doc draws
// it. A row is born DRY_RUN, even one that a bulk approval plans and
// decides in one transaction ([Desk.ApproveBulk]): its decision is a move
// like any other.
var moves = aggregate.Moves[Status]{
	StatusDryRun:   {StatusApproved, StatusRejected},
	StatusApproved: {StatusExecuted, StatusRejected},
}

// Kind is the replay as an aggregate: its statuses, its table of legal
// moves and its lock. Its rows keep no version: a decision holds the
// row's lock and checks its status.
var Kind = aggregate.Kind[uuid.UUID, Status, Replay]{
	Name:   "replay",
	States: []Status{StatusDryRun, StatusApproved, StatusExecuted, StatusRejected},
	Moves:  moves,
	Lock:   lockReplay,
	Status: func(r Replay) Status { return r.Status },
}

// Legal reports whether a replay may move from one status to another.
func Legal(from, to Status) bool { return moves.Legal(from, to) }

// decided reports whether a replay in status s holds its event for its
// consumer: approved or executed, so no other replay of it is approved.
func decided(s Status) bool { return s == StatusApproved || s == StatusExecuted }
