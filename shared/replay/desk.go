package replay

import "github.com/aivedio/pipeline/shared/preview"

// Desk is where an operator inspects, plans, approves and executes
// replays: the database, and the rules that preview what each consumer
// group's stage would do. It is safe for concurrent use.
type Desk struct {
	db    DB
	rules preview.Rules
}

// NewDesk makes a Desk on db whose verdicts come from rules: in a real
// build functions.ReplayRules(), the rules the stages supply.
func NewDesk(db DB, rules preview.Rules) *Desk {
	return &Desk{db: db, rules: rules}
}
