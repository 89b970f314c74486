package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/preview"
	"github.com/aivedio/pipeline/shared/quarantine"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Producer is the envelope producer of every replay: CloudEvents source
// /aivedio/replay.
const Producer = inbox.ReplayProducer

// Execution is what executing an approval did.
type Execution struct {
	ReplayID        uuid.UUID   `json:"replay_id"`
	OriginalEventID uuid.UUID   `json:"original_event_id"`
	ReplayEventID   uuid.UUID   `json:"replay_event_id"`
	Consumer        string      `json:"consumer"`
	Target          Destination `json:"target"`
	ExecutedAt      time.Time   `json:"executed_at"`
	// Verdict is the verdict checked at execution.
	Verdict preview.Verdict `json:"verdict"`
	// AlreadyExecuted: an earlier call executed the approval; nothing was
	// written now, and the ids are those it wrote.
	AlreadyExecuted bool `json:"already_executed"`
	// QuarantineReplayed counts the quarantine rows marked REPLAYED: the
	// message and its copies.
	QuarantineReplayed int64 `json:"quarantine_replayed"`
}

// Execute sends the approved replay approvalID: it checks the verdict once
// more, writes the replay event to the outbox (a new event id, the
// original as causation, payload and aggregate unchanged, the original
// topic, tag and message group), marks the row EXECUTED and the quarantine
// rows REPLAYED, all in one transaction. The relay publishes the event.
//
// Executing an approval again writes nothing and returns what the first
// execution wrote, with AlreadyExecuted set. A dry run not approved is
// [ErrNotApproved]; a refused replay, or one whose verdict became a
// refusal (the row then becomes REJECTED), is [ErrRefused]. operator is
// who executes.
func (desk *Desk) Execute(ctx context.Context, approvalID uuid.UUID, operator string) (Execution, error) {
	if err := checkWord("operator", operator, maxOperator); err != nil {
		return Execution{}, err
	}
	var (
		x       Execution
		refused error
	)
	err := pgx.BeginFunc(ctx, desk.db, func(tx pgx.Tx) error {
		cur, err := lockReplay(ctx, tx, approvalID)
		if err != nil {
			return err
		}
		switch cur.Status {
		case StatusExecuted:
			x = executed(cur)
			x.AlreadyExecuted = true
			return nil
		case StatusDryRun:
			return fmt.Errorf("%w: replay %s is a dry run; approve it first under a ticket", ErrNotApproved, approvalID)
		case StatusRejected:
			return refusedBefore(cur)
		}
		in, err := desk.reinspect(ctx, tx, cur)
		if err != nil {
			return err
		}
		rep := in.report
		step := rep.step(StepExecuted, in.now, operator)
		if rep.Verdict.Action == preview.Refuse {
			step.Step = StepRefused
			refused = refusal(rep.Verdict, "")
			return move(ctx, tx, cur, StatusRejected, change{step: step})
		}
		ev, err := replayEvent(in)
		if err != nil {
			return err
		}
		ctx, span := replaySpan(ctx, *rep.Event, &ev)
		defer span.End()
		if err := outbox.Write(ctx, tx, ev); err != nil {
			return fmt.Errorf("write replay of %s: %w", rep.Event.EventID, err)
		}
		replayEventID := uuid.MustParse(ev.Envelope.EventID)
		step.ReplayEventID, step.Target = ev.Envelope.EventID, rep.Target
		if err := move(ctx, tx, cur, StatusExecuted, change{step: step, topic: rep.Target.Topic, event: &replayEventID}); err != nil {
			return err
		}
		marked, err := quarantine.MarkReplayed(ctx, tx, rep.Message.Consumer, rep.Event.EventID)
		if err != nil {
			return err
		}
		// The execution is what the row records now, as a second call reads it.
		cur.ReplayEventID, cur.ExecutedAt, cur.Steps = &replayEventID, &in.now, append(cur.Steps, step)
		x = executed(cur)
		x.QuarantineReplayed = marked
		return nil
	})
	if err != nil {
		return Execution{}, err
	}
	switch {
	case refused != nil:
		countStep(StepRefused)
	case !x.AlreadyExecuted:
		countStep(StepExecuted)
	}
	return x, refused
}

// replaySpan starts the span of a replay's execution under ctx's (the
// operator's request), linked to the span that produced the original
// event. When a tracer runs, the replayed event belongs to the
// replay's trace rather than to the original's, which may have ended days
// ago; the link leads from one to the other.
func replaySpan(ctx context.Context, orig envelope.Envelope, ev *outbox.Event) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.String("aivedio.replayed_event_id", orig.EventID))}
	if tp := orig.W3CTraceParent(); tp != "" {
		opts = append(opts, trace.WithLinks(trace.LinkFromContext(telemetry.WithTraceParent(context.Background(), tp, orig.TraceState),
			attribute.String("cloudevents.event_id", orig.EventID))))
	}
	ctx, span := telemetry.Tracer().Start(ctx, "replay "+orig.EventType, opts...)
	if span.SpanContext().IsValid() && span.SpanContext().TraceID().String() != orig.TraceID {
		ev.Envelope.TraceID, ev.Envelope.TraceParent, ev.Envelope.TraceState = "", "", ""
	}
	return ctx, span
}

// replayEvent is the outbox event of a replay: the original envelope with
// a new id, caused by the original, to the original destination.
func replayEvent(in inspection) (outbox.Event, error) {
	orig := *in.report.Event
	env, err := envelope.New(envelope.NewParams{
		EventType:     orig.EventType,
		SchemaVersion: orig.SchemaVersion,
		Producer:      Producer,
		OccurredAt:    in.now,
		AggregateType: orig.AggregateType,
		AggregateID:   orig.AggregateID,
		TenantID:      orig.TenantID,
		TraceID:       orig.TraceID,
		CorrelationID: orig.CorrelationID,
		CausationID:   orig.EventID,
		Payload:       orig.Payload,
	})
	if err != nil {
		return outbox.Event{}, fmt.Errorf("build replay of %s: %w", orig.EventID, err)
	}
	ev := outbox.Event{Envelope: env, Topic: in.topic, Tag: in.report.Target.Tag}
	switch in.topic.Type {
	case catalog.FIFO:
		ev.MessageGroup = in.report.Target.MessageGroup
	case catalog.Delay:
		ev.DeliverAt = in.now // due at once: the operator decided it is time
	}
	return ev, nil
}

// executed is the execution an EXECUTED row records.
func executed(cur Replay) Execution {
	x := Execution{ReplayID: cur.ReplayID, OriginalEventID: cur.OriginalEventID, Consumer: cur.Consumer, Target: Destination{Topic: cur.Topic}}
	if cur.ReplayEventID != nil {
		x.ReplayEventID = *cur.ReplayEventID
	}
	if cur.ExecutedAt != nil {
		x.ExecutedAt = *cur.ExecutedAt
	}
	for _, s := range cur.Steps {
		if s.Step != StepExecuted {
			continue
		}
		if s.Verdict != nil {
			x.Verdict = *s.Verdict
		}
		if s.Target != nil {
			x.Target = *s.Target
		}
	}
	return x
}

// refusedBefore is the error of executing cur, REJECTED: the latest
// refusal its steps record.
func refusedBefore(cur Replay) error {
	for i := len(cur.Steps) - 1; i >= 0; i-- {
		if s := cur.Steps[i]; s.Step == StepRefused && s.Verdict != nil {
			return refusal(*s.Verdict, fmt.Sprintf("replay %s was refused: ", cur.ReplayID))
		}
	}
	return fmt.Errorf("%w: replay %s was refused: no reason recorded", ErrRefused, cur.ReplayID)
}
