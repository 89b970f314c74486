package stage

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// Payload is an event payload about one task.
type Payload interface {
	// TaskRef is the task the event is about.
	TaskRef() uuid.UUID
}

// Delivery is one event a typed stage acts on: its envelope, its decoded
// payload, the task as read before the work, the origin of what the work
// writes, the inbox consumer, and a logger naming the task and event.
type Delivery[T any] struct {
	Env      envelope.Envelope
	Payload  T
	Task     task.Task
	Origin   task.Origin
	Consumer string
	Log      *slog.Logger
}

// Locked runs fn on the task, locked, in the delivery's inbox-protected
// transaction, if the task is still in status (see [DoLocked]).
func (d Delivery[T]) Locked(ctx context.Context, db pg.DB, status task.Status, fn func(ctx context.Context, tx pgx.Tx, cur task.Task) error) error {
	return DoLocked(ctx, db, d.Consumer, d.Env, d.Task.ID, status, fn)
}

// Typed describes a stage that handles one event type whose payload is a
// T about one task. The framework decodes the payload by the envelope's
// compatibility rule (required fields enforced), reads the task, refuses
// another tenant's, and answers an event the task no longer needs (Acts
// false) with a recorded stale no-op; Work gets the rest.
type Typed[T Payload] struct {
	Name      string // the stage
	EventType string
	Consumer  string // the inbox consumer: the event's consumer group
	DB        pg.DB
	// Acts reports whether the stage acts on the task as read for this
	// payload; nil: always.
	Acts   func(t task.Task, p T) bool
	Work   func(ctx context.Context, d Delivery[T]) error
	Logger *slog.Logger
}

// NewTyped returns the function of a typed stage. It panics on a
// programming error (no DB, consumer or work).
func NewTyped[T Payload](h Typed[T]) *Function {
	if h.DB == nil || h.Consumer == "" || h.Work == nil {
		panic("stage.NewTyped: DB, Consumer and Work are required")
	}
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
	work := func(ctx context.Context, ev envelope.Envelope) error {
		p, err := Decode[T](ev)
		if err != nil {
			return err
		}
		t, err := ReadTask(ctx, h.DB, ev, p.TaskRef())
		if err != nil {
			return err
		}
		if h.Acts != nil && !h.Acts(t, p) {
			return Noop(ctx, h.DB, h.Consumer, ev)
		}
		return h.Work(ctx, Delivery[T]{Env: ev, Payload: p, Task: t, Origin: task.FromEnvelope(h.Name, ev), Consumer: h.Consumer,
			Log: h.Logger.With(slog.String("task_id", t.ID.String()), slog.String("event_id", ev.EventID))})
	}
	return New(Params{Name: h.Name, EventTypes: []string{h.EventType}, Work: work, Logger: h.Logger})
}
