// Package rules holds the replay rule of every consumer group a stage
// serves: what a replayed event would do to its task as the task is now
// ([preview.Rule]), decided with the predicates of shared/task that the
// stage acts on.
//
// The rules are here, and not beside each stage's code, so that whatever
// plans replays can know them without linking the stages: the adapter's
// `quarantine` and `replay` commands build a replay desk with [All] and
// import no functions/ package (the layering test at the module root holds
// them to it), while the API and the reconcile stage use the same rules
// through functions.ReplayRules. A rule reads the payload type the stage
// reads and the shared predicate the stage branches on, so a stage that
// changes when it acts changes that predicate, and its rule with it.
//
// A rule is a preview, not a guarantee: the stage that receives a replay
// decides again from the task's state and version.
package rules
