package replay

import (
	"cmp"
	"time"

	"github.com/aivedio/pipeline/shared/config"
	"github.com/aivedio/pipeline/shared/preview"
)

// Desk is where an operator inspects, plans, approves and executes
// replays: the database, and the rules that preview what each consumer
// group's stage would do. It is safe for concurrent use.
type Desk struct {
	db     DB
	rules  preview.Rules
	window time.Duration
}

// DeskOpts are a Desk's optional knobs.
type DeskOpts struct {
	// ReplayWindow is REPLAY_WINDOW: an event older than it is refused
	// ([ErrOutsideWindow]); config.DefaultReplayWindow when zero. Give the
	// desk the window the reconcile scan prunes the inbox with.
	ReplayWindow time.Duration
}

// NewDesk makes a Desk on db whose verdicts come from rules: in a real
// build rules.All() (package shared/replay/rules), one per consumer group.
// opts may be nil.
func NewDesk(db DB, rules preview.Rules, opts *DeskOpts) *Desk {
	if opts == nil {
		opts = &DeskOpts{}
	}
	return &Desk{db: db, rules: rules, window: cmp.Or(opts.ReplayWindow, config.DefaultReplayWindow)}
}
