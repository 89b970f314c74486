// Package preview says what a replayed event would do, before anything is
// sent: the vocabulary between replay (shared/replay), which plans and
// sends replays, and the stages (functions/<stage>), whose predicates
// decide what they do with an event.
//
// Each stage has a [Rule] for the consumer group it serves, in
// shared/replay/rules (rules.All gathers them), which links no stage so
// that the adapter's operator commands use the same rules as the API.
// [RuleOf] builds one from the stage's payload type: the payload is
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
