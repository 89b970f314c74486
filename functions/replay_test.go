package functions_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aivedio/pipeline/functions"
	"github.com/aivedio/pipeline/shared/catalog"
)

// Every consumer group a built stage serves has a replay rule, and no
// other group has one (a group without a stage in the build is refused
// for replay: replay.no_rule).
func TestEveryBuiltGroupHasAReplayRule(t *testing.T) {
	t.Parallel()
	rules := functions.ReplayRules()
	built := functions.Built()
	for _, g := range catalog.Groups() {
		rule, ok := rules[g.Name]
		require.Equal(t, slices.Contains(built, g.Stage), ok, g.Name)
		if !ok {
			continue
		}
		var events []string
		for _, s := range g.Subscriptions {
			events = append(events, s.Tags...)
		}
		if rule.EventType() != catalog.EventPostprocess { // its tags are steps, not event types
			require.Contains(t, events, rule.EventType(), "%s handles what it subscribes to", g.Name)
		}
	}
	require.Len(t, rules, len(catalog.Groups()))
}
