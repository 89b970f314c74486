package functions

import (
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/replay/rules"
)

// ReplayRules are the previews of the stages this build serves, by the
// consumer group each serves: what a replayed event would do. They live in
// shared/replay/rules, which links no stage, so that the adapter's
// operator commands use the very rules the API and the reconcile stage use.
func ReplayRules() preview.Rules { return rules.All() }
