// Package replay is the operator's way back for a quarantined message
// (docs/design.md §6, §7): inspect what is in message_quarantine, see what a
// replay would do, have it approved under a ticket, and send it again, each
// step audited in message_replays. The adapter's `quarantine` and `replay`
// commands and the API's /v1/admin endpoints are thin shells over it.
//
// # Steps and statuses
//
// [Desk.Show] returns a quarantined message whole, with its replays;
// listing is shared/quarantine's. [Desk.Plan] is the dry run: it reads the
// message, the task it targets as it is now and the side effects done
// for it, gives a verdict (the replay would act, be a stale no-op, or is
// refused) and records a DRY_RUN row whose id names the plan. Each later
// step checks the verdict again against the state at that moment:
//
//	DRY_RUN  --Approve-->  APPROVED  (under a ticket, an operator, a reason)
//	DRY_RUN  --Approve-->  REJECTED  (the verdict is a refusal)
//	APPROVED --Execute-->  EXECUTED  (the replay event is in the outbox)
//	APPROVED --Execute-->  REJECTED  (the verdict became a refusal)
//
// That is the table of legal moves ([Kind], [Legal]); the one write that
// changes a status refuses any other move. An execution writes a new
// envelope (a new event id, the original as its causation_id, payload,
// aggregate, tenant, correlation and trace unchanged) with outbox.Write
// to the original topic, tag and message group, and marks the quarantine
// rows of the event for that consumer REPLAYED, in one transaction; the
// relay publishes it, nothing here talks to the broker. [Desk.PlanBulk],
// [Desk.ApproveBulk] and [Desk.ExecuteBulk] do the same for every open
// message of one consumer group a quarantine.Filter selects. Replays are
// new events: consumer offsets are never reset.
//
// # Guarantees
//
// Executing one approval twice, concurrently or not, writes one event: the
// row is locked, and a row already EXECUTED returns the replay_event_id it
// got the first time. One event is approved for replay to one consumer at
// most once (an advisory lock on the pair serialises approvals), so the
// rows of an event quarantined under several payloads are replayed once.
//
// [Desk.Discard] is the other way out: a message closed for good under a
// ticket, operator and reason, under the same lock, so a message is either
// replayed or discarded. [Desk.RecordOutcomes] records each executed
// replay's after-snapshot once its consumer committed the replay event
// (the reconcile tick calls it): the task's state and effects then, beside
// the plan's before.
//
// A replay cannot repeat a business effect, whatever the verdict said: the
// stage that receives it decides from the task's current state and version
// exactly as for any other delivery (a late event is a stale no-op), a
// provider attempt is keyed by UNIQUE(provider_idempotency_key) and a
// charge by the ledger's UNIQUE(ledger_business_type, business_id). The
// verdict is the operator's preview of that decision, not its enforcement.
//
// Refusals are final for a row: a message the consumer would quarantine
// again (unreadable, a payload that does not fit its schema, an unknown
// task, an event whose tenant does not own its task, a payload that
// contradicts what the consumer recorded under the same event id) is
// never sent.
//
// # The replay window
//
// An event older than the replay window (REPLAY_WINDOW, [DeskOpts]) is
// refused with the code [CodeOutsideWindow], and deciding it fails with
// [ErrOutsideWindow]: retention prunes the inbox past the window, so the
// consumer may no longer know that it applied the event. The event's time
// is the earliest the database can vouch for, never the producer's
// occurred_at; the report carries it (EventTime, EventTimeFrom).
//
// # Rules
//
// Replay does not know the stages: a [Desk] is made with the rules of the
// build (preview.Rules, one per consumer group): in every binary those of
// package [github.com/aivedio/pipeline/shared/replay/rules], which link no
// stage; package preview says how a rule decides. Replay itself refuses
// what no rule may allow: a message of a group without a rule, of another
// event type, of an unknown task or of another tenant.
//
// # Audit
//
// Every step is a row or a state change of message_replays: the columns
// hold the current decision (status, ticket, operator, reason, approved_at,
// executed_at, replay_event_id), and dry_run_report holds the plan as the
// dry run found it, the quarantine row it is about, and every step with
// who, when, ticket, reason and the verdict checked at that moment. A dry
// run needs no ticket: its row says ticket [NoTicket] and reason
// [DryRunReason] until it is approved. A message without a readable event
// id is recorded with the nil UUID as original_event_id. A bulk dry run
// reads only; [Desk.ApproveBulk] records each message's plan with its
// approval or refusal.
package replay
