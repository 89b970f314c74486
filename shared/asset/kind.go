package asset

import (
	"github.com/google/uuid"

	"github.com/aivedio/pipeline/shared/aggregate"
)

// uploadMoves is an upload's table of legal moves: handed out, it is
// stored and checked (PROCESSING) or expires (FAILED); probed, it is
// READY or FAILED with what the probe found.
var uploadMoves = aggregate.Moves[Status]{
	PendingUpload: {Processing, Failed},
	Processing:    {Ready, Failed},
}

// Upload is a tenant's upload as an aggregate: its statuses, its table of
// legal moves and its lock, for [aggregate.Apply]. A transition's work
// moves the upload with [MarkUploaded], [MarkReady] or [Fail]. The assets
// table keeps no version: what a transition expects is the status alone.
var Upload = aggregate.Kind[uuid.UUID, Status, Asset]{
	Name:   "upload",
	States: []Status{PendingUpload, Processing, Ready, Failed},
	Moves:  uploadMoves,
	Lock:   Lock,
	Status: func(a Asset) Status { return a.Status },
}

// Guard is a transition of an upload that holds while it is, as locked,
// in one of from (any status when from is empty).
func Guard(from ...Status) aggregate.Transition[Status, Asset] {
	return aggregate.Transition[Status, Asset]{From: from}
}
