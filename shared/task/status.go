package task

// Status is a generation task's state (generation_tasks.status).
type Status string

// The states of docs/design.md §5.
const (
	Queued            Status = "QUEUED"
	Submitting        Status = "SUBMITTING"
	WaitingRetry      Status = "WAITING_RETRY"
	Reconciling       Status = "RECONCILING"
	ProviderRunning   Status = "PROVIDER_RUNNING"
	Fetching          Status = "FETCHING"
	MediaProcessing   Status = "MEDIA_PROCESSING"
	Succeeded         Status = "SUCCEEDED"
	Failed            Status = "FAILED"
	Canceled          Status = "CANCELED"
	CanceledWithOut   Status = "CANCELED_WITH_OUTPUT"
	CancelReconciling Status = "CANCEL_RECONCILING"
	NeedsAttention    Status = "NEEDS_ATTENTION"
)

// Terminal reports whether no automatic transition leaves s.
// NEEDS_ATTENTION is terminal for the pipeline: only an operator moves it.
func (s Status) Terminal() bool {
	switch s {
	case Succeeded, Failed, Canceled, CanceledWithOut, NeedsAttention:
		return true
	}
	return false
}

// Charged reports whether a task that ended in s pays for its generation:
// the reservation is captured, not released. A task whose output the
// content review rejected is FAILED and charged all the same: see
// [Task.Charged].
func (s Status) Charged() bool { return s == Succeeded || s == CanceledWithOut }

// ErrContentRejected is the error code of a task whose output the content
// review rejected (docs/journey.md, "Content review").
const ErrContentRejected = "review.content_rejected"

// Charged reports whether t, ended, pays for its generation: a charged
// state, or FAILED because the content review rejected an output the
// provider had already made and billed us for (the product rule of
// docs/journey.md, "Content review"). Billing decides from the task's row, never
// from a message, so a late settle cannot change it.
func (t Task) Charged() bool {
	return t.Status.Charged() || (t.Status == Failed && t.ErrorCode == ErrContentRejected)
}

// Served reports whether t's stored outputs may be handed to the client:
// not once the content review rejected them.
func (t Task) Served() bool { return t.ErrorCode != ErrContentRejected }

// transitions lists the legal moves particular to each state; the table
// of every legal move ([Kind]) adds FAILED and NEEDS_ATTENTION from every
// state that is not terminal.
var transitions = map[Status][]Status{
	Queued:            {Submitting, Canceled, WaitingRetry},
	Submitting:        {ProviderRunning, WaitingRetry, Reconciling},
	WaitingRetry:      {Submitting, Canceled, WaitingRetry},
	Reconciling:       {ProviderRunning, Submitting, NeedsAttention},
	ProviderRunning:   {Fetching, Canceled, CanceledWithOut, CancelReconciling},
	Fetching:          {MediaProcessing, CanceledWithOut},
	MediaProcessing:   {Succeeded, CanceledWithOut},
	CancelReconciling: {Canceled, CanceledWithOut, Fetching, NeedsAttention},
}

// Legal reports whether a task may move from one state to another: the
// task's table of legal moves ([Kind]).
func Legal(from, to Status) bool { return moves.Legal(from, to) }

// All lists every state, in the order of docs/design.md §5.
func All() []Status {
	return []Status{Queued, Submitting, WaitingRetry, Reconciling, ProviderRunning, Fetching,
		MediaProcessing, Succeeded, Failed, Canceled, CanceledWithOut, CancelReconciling, NeedsAttention}
}
