// Package preview says what a replayed event would do, before anything is
// sent: the vocabulary between replay (shared/replay), which plans and
// sends replays, and the stages (functions/<stage>), which alone know what
// they do with an event.
//
// Each stage supplies a [Rule] for the consumer group it serves, beside
// its code (functions/<stage>/preview.go; functions.ReplayRules gathers
// them). [RuleOf] builds one from the stage's payload type: the payload is
// decoded as the stage decodes it, the rule names the task the event is
// about or refuses the event ([Refusal]), and it decides from the [State]
// (the task as it is now, and the [Effects] already done for it, which
// [ReadEffects] reads) with the predicates the stage acts on. The [Verdict]
// says whether the stage would act, record a stale no-op, or must never
// receive the event.
//
// A verdict is a preview, not a guarantee: the stage that receives a
// replay decides from the task's state and version like for any other
// delivery, and the business keys refuse a second effect. This package
// reads and never writes.
package preview
