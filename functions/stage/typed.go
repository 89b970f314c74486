package stage

import (
	"context"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/aivedio/pipeline/shared/aggregate"
	"github.com/aivedio/pipeline/shared/catalog"
	"github.com/aivedio/pipeline/shared/envelope"
	"github.com/aivedio/pipeline/shared/inbox"
	"github.com/aivedio/pipeline/shared/outcome"
	"github.com/aivedio/pipeline/shared/pg"
	"github.com/aivedio/pipeline/shared/task"
)

// Payload is an event payload about one task, which names its event type
// (a task.Message).
type Payload interface {
	// TaskRef is the task the event is about.
	TaskRef() uuid.UUID
	EventType() string
}

// waiter is a payload of a business wait's delayed event: it embeds a
// task.Wait.
type waiter interface{ Waited() task.Wait }

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

	db    pg.DB
	hooks *hooks
}

// Locked runs fn on the task, locked, in the delivery's inbox-protected
// transaction, if the task is still in status: a stage reads the task
// before its slow work (a provider call, a download, ffmpeg) and another
// delivery may have moved it since; then the event is a stale no-op and fn
// does not run. fn's error rolls its work back and is returned unchanged.
// The after-commit hooks fn adds run once the transaction committed. It
// is [Delivery.Apply] with [task.Guard](status), for work that is never
// stale past its status.
func (d Delivery[T]) Locked(ctx context.Context, status task.Status, fn func(ctx context.Context, tx pgx.Tx, cur task.Task) error) error {
	return d.Apply(ctx, task.Guard(status), func(ctx context.Context, tx pgx.Tx, cur task.Task) (aggregate.Result, error) {
		return aggregate.Applied, fn(ctx, tx, cur)
	})
}

// Apply runs act on the delivery's task, locked, in the delivery's
// inbox-protected transaction, if tr's precondition holds on it (see
// [aggregate.Apply]): a precondition that does not hold, or act answering
// [aggregate.Stale], records the event as a stale no-op. act's error
// rolls its work back and is returned unchanged. The after-commit hooks
// act adds run once the transaction committed its work as applied.
func (d Delivery[T]) Apply(ctx context.Context, tr aggregate.Transition[task.Status, task.Task], act aggregate.Act[task.Task]) error {
	return ApplyTo(ctx, d, task.Kind, d.Task.ID, tr, act)
}

// ApplyTo is [Delivery.Apply] on row id of any aggregate k (a render, an
// upload) the delivery's work changes.
func ApplyTo[T, ID any, S ~string, R any](ctx context.Context, d Delivery[T], k aggregate.Kind[ID, S, R], id ID,
	tr aggregate.Transition[S, R], act aggregate.Act[R],
) error {
	return d.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		res, err := aggregate.Apply(ctx, tx, k, id, tr, act)
		if err != nil {
			return "", err
		}
		return inboxResult(res), nil
	})
}

// inboxResult is the inbox's record of a transition that did res.
func inboxResult(res aggregate.Result) inbox.Result {
	if res == aggregate.Applied {
		return inbox.Applied
	}
	return inbox.StaleNoop
}

// InTx runs fn in the delivery's inbox-protected transaction (inbox.Do),
// for work that is not one locked step. The after-commit hooks fn adds run
// once the transaction committed fn's work as applied (not for a
// duplicate, a stale no-op or a rollback).
func (d Delivery[T]) InTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) (inbox.Result, error)) error {
	mark := len(d.hooks.pending)
	out, err := inbox.Do(ctx, d.db, d.Consumer, d.Env, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		d.hooks.pending = d.hooks.pending[:mark] // a retried transaction adds them again
		return fn(ctx, tx)
	})
	committed := d.hooks.pending[mark:]
	d.hooks.pending = d.hooks.pending[:mark]
	if err == nil && !out.Duplicate && out.Result == inbox.Applied {
		runHooks(ctx, committed)
	}
	return err
}

// Noop records the delivery as a stale no-op in the inbox.
func (d Delivery[T]) Noop(ctx context.Context) error {
	return Noop(ctx, d.db, d.Consumer, d.Env)
}

// Escalate sends the task to NEEDS_ATTENTION with err's reason when err
// is [IsUncurable] (see [Escalate]); then, only once that committed, the
// after-commit hooks then.
func (d Delivery[T]) Escalate(ctx context.Context, err error, then ...func(ctx context.Context)) error {
	if err == nil || !IsUncurable(err) {
		return err
	}
	code, message := attentionReason(err)
	ierr := d.InTx(ctx, func(ctx context.Context, tx pgx.Tx) (inbox.Result, error) {
		for _, fn := range then {
			d.AfterCommit(fn)
		}
		return escalateTx(ctx, tx, d.Origin, d.Task.ID, code, message)
	})
	return escalated(ctx, d.Task.ID, code, message, ierr, d.Log)
}

// AfterCommit adds fn, work that must follow the delivery's commit and
// must not run for a duplicate or a stale no-op: releasing concurrency
// slots, say. Added inside [Delivery.Locked] or [Delivery.InTx], fn runs
// when that transaction committed its work; added elsewhere, when the
// stage's work returned nil. fn outlives the delivery's cancellation and
// cannot fail the delivery: what it does must be safe to lose (a slot
// lease ends by itself).
func (d Delivery[T]) AfterCommit(fn func(ctx context.Context)) {
	d.hooks.pending = append(d.hooks.pending, fn)
}

// hooks are a delivery's after-commit work not run yet.
type hooks struct {
	pending []func(ctx context.Context)
}

func runHooks(ctx context.Context, fns []func(ctx context.Context)) {
	ctx = context.WithoutCancel(ctx)
	for _, fn := range fns {
		fn(ctx)
	}
}

// Typed describes a stage's handling of one event type whose payload is a
// T about one task. The framework decodes the payload by the envelope's
// compatibility rule (required fields enforced), reads the task, refuses
// another tenant's, and answers an event the task no longer needs with a
// recorded stale no-op: a delayed event whose task.Wait no longer holds
// (the task left the state and version it expected), or one the stage's
// Acts declines. Work gets the rest.
type Typed[T Payload] struct {
	// Group is the consumer group whose messages of T's event type the
	// stage (Group.Stage) handles; its name is the inbox consumer.
	Group catalog.Group
	DB    pg.DB
	// TaskOf names the task of an event whose payload does not (a
	// callback names its job, the envelope's aggregate the task); nil: the
	// payload's TaskRef.
	TaskOf func(env envelope.Envelope, p T) (uuid.UUID, error)
	// Resumes reports whether the task still needs the event even though
	// its wait no longer holds (a submit resumes the attempt its own
	// earlier delivery opened); nil: never.
	Resumes func(t task.Task) bool
	// Acts reports whether the stage acts on the task as read for this
	// payload; nil: always.
	Acts func(t task.Task, p T) bool
	Work func(ctx context.Context, d Delivery[T]) error
	// Untasked does the work for an event whose payload names no task
	// (the probe of a tenant's upload: the asset is the aggregate); nil:
	// such an event is permanent. Its Delivery has no Task, so Untasked
	// reads and checks what it needs itself (the asset's tenant against
	// the event's: [ReadUpload]).
	Untasked func(ctx context.Context, d Delivery[T]) error
	Logger   *slog.Logger
}

// Handler is one event type's typed handling, for a stage of several
// ([Combine]).
type Handler interface {
	handle() (eventType string, work WorkFunc)
}

// NewTyped returns the function of a typed stage of one event type. It
// panics on a programming error (no DB, group or work).
func NewTyped[T Payload](h Typed[T]) *Function {
	return Combine(Params{Name: h.Group.Stage, Logger: h.Logger}, h)
}

// Combine returns the function of a stage that handles several event
// types, each by its typed handler, and p's triggers. p's EventTypes and
// Work are taken from the handlers.
func Combine(p Params, handlers ...Handler) *Function {
	works := make(map[string]WorkFunc, len(handlers))
	for _, h := range handlers {
		eventType, work := h.handle()
		p.EventTypes = append(p.EventTypes, eventType)
		works[eventType] = work
	}
	p.Work = func(ctx context.Context, ev envelope.Envelope) error { return works[ev.EventType](ctx, ev) }
	return New(p)
}

func (h Typed[T]) handle() (string, WorkFunc) {
	if h.DB == nil || h.Group.Name == "" || h.Group.Stage == "" || h.Work == nil {
		panic("stage.Typed: DB, Group and Work are required")
	}
	var zero T
	consumer, name := h.Group.Name, h.Group.Stage
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
	return zero.EventType(), func(ctx context.Context, ev envelope.Envelope) error {
		p, err := Decode[T](ev)
		if err != nil {
			return err
		}
		id := p.TaskRef()
		if h.TaskOf != nil {
			if id, err = h.TaskOf(ev, p); err != nil {
				return err
			}
		}
		if id == uuid.Nil {
			if h.Untasked == nil {
				return outcome.Permanentf("payload.invalid", "%s names no task", ev.EventType)
			}
			return run(ctx, untaskedDelivery(h.DB, consumer, name, h.Logger, ev, p), h.Untasked)
		}
		t, err := ReadTask(ctx, h.DB, ev, id)
		if err != nil {
			return err
		}
		if w, ok := any(p).(waiter); ok && !w.Waited().Holds(t) && (h.Resumes == nil || !h.Resumes(t)) {
			return Noop(ctx, h.DB, consumer, ev)
		}
		if h.Acts != nil && !h.Acts(t, p) {
			return Noop(ctx, h.DB, consumer, ev)
		}
		d := Delivery[T]{Env: ev, Payload: p, Task: t, Origin: task.FromEnvelope(name, ev), Consumer: consumer,
			Log: h.Logger.With(slog.String("task_id", t.ID.String()), slog.String("event_id", ev.EventID)),
			db:  h.DB, hooks: &hooks{}}
		return run(ctx, d, h.Work)
	}
}

// untaskedDelivery is the delivery of an event about no task.
func untaskedDelivery[T any](db pg.DB, consumer, name string, log *slog.Logger, ev envelope.Envelope, p T) Delivery[T] {
	return Delivery[T]{Env: ev, Payload: p, Origin: task.FromEnvelope(name, ev), Consumer: consumer,
		Log: log.With(slog.String("event_id", ev.EventID), slog.String(ev.AggregateType+"_id", ev.AggregateID)),
		db:  db, hooks: &hooks{}}
}

// Untasked describes a stage's handling of one event type whose aggregate
// is not a task (a render): the framework decodes the payload by the
// envelope's compatibility rule (required fields enforced) and Work gets
// a Delivery without a Task, reading and checking what it needs itself
// (the aggregate's tenant against the event's: [CheckTenant]).
type Untasked[T interface{ EventType() string }] struct {
	Group  catalog.Group
	DB     pg.DB
	Work   func(ctx context.Context, d Delivery[T]) error
	Logger *slog.Logger
}

// NewUntasked returns the function of a stage of one event type about no
// task. It panics on a programming error (no DB, group or work).
func NewUntasked[T interface{ EventType() string }](h Untasked[T]) *Function {
	return Combine(Params{Name: h.Group.Stage, Logger: h.Logger}, h)
}

func (h Untasked[T]) handle() (string, WorkFunc) {
	if h.DB == nil || h.Group.Name == "" || h.Group.Stage == "" || h.Work == nil {
		panic("stage.Untasked: DB, Group and Work are required")
	}
	if h.Logger == nil {
		h.Logger = slog.New(slog.DiscardHandler)
	}
	var zero T
	return zero.EventType(), func(ctx context.Context, ev envelope.Envelope) error {
		p, err := Decode[T](ev)
		if err != nil {
			return err
		}
		return run(ctx, untaskedDelivery(h.DB, h.Group.Name, h.Group.Stage, h.Logger, ev, p), h.Work)
	}
}

// run does a delivery's work, then the after-commit hooks added outside
// its transactions.
func run[T any](ctx context.Context, d Delivery[T], work func(ctx context.Context, d Delivery[T]) error) error {
	if err := work(ctx, d); err != nil {
		return err
	}
	runHooks(ctx, d.hooks.pending)
	return nil
}

// Stateless is the typed handling of an event by a stage that keeps no
// state in PostgreSQL (notify): the payload is decoded by the envelope's
// compatibility rule, required fields enforced, and Work gets it; no task
// is read and no inbox row written, so Work's effect must be idempotent
// by itself.
type Stateless[T interface{ EventType() string }] struct {
	Work func(ctx context.Context, env envelope.Envelope, p T) error
}

func (h Stateless[T]) handle() (string, WorkFunc) {
	if h.Work == nil {
		panic("stage.Stateless: Work is required")
	}
	var zero T
	return zero.EventType(), func(ctx context.Context, ev envelope.Envelope) error {
		p, err := Decode[T](ev)
		if err != nil {
			return err
		}
		return h.Work(ctx, ev, p)
	}
}
