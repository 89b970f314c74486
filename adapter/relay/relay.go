// Package relay is the outbox relay, the only writer to RocketMQ: it claims
// committed, unpublished outbox rows, publishes each with its stable event
// id, and marks it published.
//
// # Guarantee
//
// Every committed outbox row is published at least once, with the same
// event id every time. Rows are claimed in batches with FOR UPDATE SKIP
// LOCKED and a lease (lease_owner, lease_until), so several relays share the
// work; a relay killed at any moment leaves rows whose lease runs out and
// which another relay (or itself, restarted) publishes again. The worst case
// is a duplicate publish, which the consumers' inbox absorbs.
//
// A failed publish raises publish_attempts, records last_error_code and
// last_error, and pushes available_at back with jittered exponential
// backoff: a broker outage never loses a row, the outbox just grows.
//
// Events of one FIFO message group are published one at a time in the order
// they were written: a row is claimed only when no earlier row of its group
// is unpublished.
package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/aivedio/pipeline/adapter/cerocketmq"
	"github.com/aivedio/pipeline/adapter/mq"
	"github.com/aivedio/pipeline/shared/outbox"
	"github.com/aivedio/pipeline/shared/telemetry"
)

// Params configures a Relay.
type Params struct {
	Pool     *pgxpool.Pool
	Producer mq.Producer
	// Owner names this relay in lease_owner; unique per process.
	Owner string
	// Batch is how many rows one claim takes; 64 when zero.
	Batch int
	// Publishers bounds concurrent sends within a batch; 8 when zero.
	Publishers int
	// Lease is how long claimed rows stay reserved; 30 s when zero. A relay
	// that dies holding rows delays them by at most this.
	Lease time.Duration
	// Poll is the longest wait between claims when no NOTIFY arrives; 1 s
	// when zero.
	Poll time.Duration
	// BackoffBase and BackoffMax shape the retry delay after a failed
	// publish; 1 s and 5 min when zero.
	BackoffBase, BackoffMax time.Duration
	// SendTimeout bounds one publish; 10 s when zero.
	SendTimeout time.Duration
	Logger      *slog.Logger
	Metrics     *Metrics
}

// Relay publishes the outbox.
type Relay struct {
	p Params
}

// New returns a Relay; it panics on a missing dependency.
func New(p Params) *Relay {
	if p.Pool == nil || p.Producer == nil || p.Owner == "" {
		panic("relay.New: Pool, Producer and Owner are required")
	}
	if p.Batch <= 0 {
		p.Batch = 64
	}
	if p.Publishers <= 0 {
		p.Publishers = 8
	}
	if p.Lease <= 0 {
		p.Lease = 30 * time.Second
	}
	if p.Poll <= 0 {
		p.Poll = time.Second
	}
	if p.BackoffBase <= 0 {
		p.BackoffBase = time.Second
	}
	if p.BackoffMax <= 0 {
		p.BackoffMax = 5 * time.Minute
	}
	if p.SendTimeout <= 0 {
		p.SendTimeout = 10 * time.Second
	}
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	if p.Metrics == nil {
		p.Metrics = NewMetrics(nil)
	}
	return &Relay{p: p}
}

// claimSQL leases the next due rows. A FIFO row waits while an earlier row
// of its message group is unpublished, so a group is published in order.
const claimSQL = `
UPDATE outbox_events SET lease_owner = $1, lease_until = now() + $2 * interval '1 millisecond'
WHERE event_id IN (
	SELECT c.event_id FROM outbox_events c
	WHERE c.published_at IS NULL AND c.available_at <= now()
	  AND (c.lease_until IS NULL OR c.lease_until < now())
	  AND (c.message_group IS NULL OR NOT EXISTS (
		SELECT 1 FROM outbox_events e
		WHERE e.published_at IS NULL AND e.topic = c.topic AND e.message_group = c.message_group
		  AND (e.created_at, e.event_id) < (c.created_at, c.event_id)))
	ORDER BY c.available_at, c.created_at
	LIMIT $3
	FOR UPDATE SKIP LOCKED)
RETURNING ` + outbox.Columns

// RunOnce claims one batch and publishes it. It returns how many rows it
// claimed; a full batch means more may be waiting.
func (r *Relay) RunOnce(ctx context.Context) (int, error) {
	rows, err := r.p.Pool.Query(ctx, claimSQL, r.p.Owner, r.p.Lease.Milliseconds(), r.p.Batch)
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	claimed, err := outbox.Scan(rows)
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	if len(claimed) == 0 {
		return 0, nil
	}

	var (
		mu        sync.Mutex
		published []string
		failed    []failure
		wg        sync.WaitGroup
		sem       = make(chan struct{}, r.p.Publishers)
	)
	for _, row := range claimed {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			err := r.publish(ctx, row)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed = append(failed, failure{row: row, err: err})
				return
			}
			published = append(published, row.Envelope.EventID)
		}()
	}
	wg.Wait()

	// Recording must survive a stop: the sends already happened.
	rec, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := r.markPublished(rec, published); err != nil {
		return len(claimed), err
	}
	for _, f := range failed {
		if err := r.markFailed(rec, f); err != nil {
			return len(claimed), err
		}
	}
	return len(claimed), nil
}

type failure struct {
	row outbox.Stored
	err error
}

// publish sends one row in a producer span whose parent is the span that
// wrote the row; the message carries the publish span as its traceparent.
func (r *Relay) publish(ctx context.Context, row outbox.Stored) (err error) {
	start := time.Now()
	env := row.Envelope
	ctx, span := telemetry.Tracer().Start(telemetry.WithTraceParent(ctx, env.W3CTraceParent(), env.TraceState),
		"publish "+row.Topic.BrokerName(), trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			semconv.MessagingSystemRocketMQ,
			semconv.MessagingOperationTypeSend,
			semconv.MessagingDestinationName(row.Topic.BrokerName()),
			semconv.MessagingMessageID(env.EventID),
			attribute.String("cloudevents.event_type", env.EventType),
			attribute.Int("aivedio.publish_attempt", row.PublishAttempts+1),
			attribute.Float64("aivedio.outbox_wait_seconds", time.Since(row.CreatedAt).Seconds())))
	defer func() {
		r.p.Metrics.observe(row.Topic.Name, time.Since(start), err) // a row that is no valid event too
		telemetry.SpanError(span, err)
		span.End()
	}()
	if !row.DeliverAt.IsZero() {
		span.SetAttributes(attribute.String("aivedio.deliver_at", row.DeliverAt.Format(time.RFC3339Nano)))
	}
	if tp, ts := telemetry.TraceParent(ctx); tp != "" && tp[3:35] == env.TraceID {
		env.TraceParent, env.TraceState = tp, ts
	}
	ev, err := env.ToCloudEvent()
	if err != nil {
		return fmt.Errorf("%w: %w", errInvalidRow, err)
	}
	sctx := cerocketmq.WithTopic(ctx, row.Topic.BrokerName())
	sctx = cerocketmq.WithTag(sctx, row.Tag)
	if row.MessageGroup != "" {
		sctx = cerocketmq.WithMessageGroup(sctx, row.MessageGroup)
	}
	if !row.DeliverAt.IsZero() {
		sctx = cerocketmq.WithDeliveryTime(sctx, row.DeliverAt)
	}
	sctx, cancel := context.WithTimeout(sctx, r.p.SendTimeout)
	defer cancel()
	_, err = cerocketmq.NewSender(r.p.Producer, "").SendMessage(sctx, binding.ToMessage(&ev))
	if err != nil && errors.Is(sctx.Err(), context.DeadlineExceeded) && !errors.Is(err, context.DeadlineExceeded) {
		// The client reports its own deadline as a gRPC status: still a timeout.
		err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

func (r *Relay) markPublished(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	// A lease lost to another relay means that relay may publish the row
	// again: a duplicate with the same event id, never a loss.
	_, err := r.p.Pool.Exec(ctx, `
		UPDATE outbox_events SET published_at = now(), lease_owner = NULL, lease_until = NULL
		WHERE event_id = ANY($1::uuid[]) AND published_at IS NULL`, ids)
	if err != nil {
		return fmt.Errorf("mark %d outbox rows published: %w", len(ids), err)
	}
	return nil
}

func (r *Relay) markFailed(ctx context.Context, f failure) error {
	delay := r.backoff(f.row.PublishAttempts + 1)
	code := errorCode(f.err)
	r.p.Logger.WarnContext(ctx, "publish failed; will retry",
		slog.String("event_id", f.row.Envelope.EventID), slog.String("event_type", f.row.Envelope.EventType),
		slog.Int("attempt", f.row.PublishAttempts+1), slog.Duration("retry_in", delay), slog.String("error", f.err.Error()))
	_, err := r.p.Pool.Exec(ctx, `
		UPDATE outbox_events SET publish_attempts = publish_attempts + 1, last_error_code = $2, last_error = $3,
			available_at = now() + $4 * interval '1 millisecond', lease_owner = NULL, lease_until = NULL
		WHERE event_id = $1 AND lease_owner = $5`,
		f.row.Envelope.EventID, code, truncate(f.err.Error(), 2048), delay.Milliseconds(), r.p.Owner)
	if err != nil {
		return fmt.Errorf("record failed publish of %s: %w", f.row.Envelope.EventID, err)
	}
	return nil
}

// backoff is exponential in the attempt with full jitter, so relays that
// failed together do not retry together.
func (r *Relay) backoff(attempt int) time.Duration {
	d := r.p.BackoffBase
	for i := 1; i < attempt && d < r.p.BackoffMax; i++ {
		d *= 2
	}
	d = min(d, r.p.BackoffMax)
	return d/2 + rand.N(d/2+1)
}

// errInvalidRow marks a row that cannot become an event. It is retried like
// any failure (never dropped) and shows up under its own error code.
var errInvalidRow = errors.New("outbox row is not a valid event")

func errorCode(err error) string {
	switch {
	case errors.Is(err, errInvalidRow):
		return "invalid_row"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, mq.ErrUnauthenticated):
		return "unauthenticated"
	case errors.Is(err, mq.ErrForbidden):
		return "forbidden"
	default:
		return "publish_failed"
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// Run publishes until ctx ends. It wakes on the outbox's NOTIFY and polls
// every Poll besides, so a missed notification delays rows by at most Poll.
func (r *Relay) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	var helpers sync.WaitGroup
	defer helpers.Wait() // the listener returns its connection before Run returns
	helpers.Add(2)
	go func() { defer helpers.Done(); r.listen(ctx, wake) }()
	go func() { defer helpers.Done(); r.watchBacklog(ctx) }()
	for ctx.Err() == nil {
		n, err := r.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			r.p.Logger.WarnContext(ctx, "relay cycle failed", slog.String("error", err.Error()))
		}
		if n == r.p.Batch && err == nil {
			continue // more may be waiting
		}
		select {
		case <-wake:
		case <-time.After(r.p.Poll):
		case <-ctx.Done():
		}
	}
	return nil
}

// listen forwards outbox NOTIFYs to wake; it reconnects after errors.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		err := r.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		r.p.Logger.WarnContext(ctx, "outbox listen failed; polling until it reconnects", slog.String("error", err.Error()))
		select {
		case <-time.After(r.p.Poll):
		case <-ctx.Done():
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := r.p.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN outbox_events"); err != nil {
		return err
	}
	// The connection goes back to the pool still listening otherwise.
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_, _ = conn.Exec(uctx, "UNLISTEN *")
	}()
	for {
		if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
			return err
		}
		select {
		case wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// watchBacklog refreshes the outbox gauges.
func (r *Relay) watchBacklog(ctx context.Context) {
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		count, oldest, err := outbox.Pending(qctx, r.p.Pool)
		cancel()
		if err == nil {
			r.p.Metrics.pending.Set(float64(count))
			r.p.Metrics.oldest.Set(oldest.Seconds())
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}
